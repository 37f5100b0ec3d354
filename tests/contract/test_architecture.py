"""The shape of the package: no import cycle, one contract that both backends keep, and one
answer from every path -- the native fast path, the slower ones and Redis -- to one script."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Protocol

import numpy as np
import pytest
from support.helpers import ROOT

import shmwin
from shmwin import Limiter, ManualClock, TokenBucket, Window, backends, policy
from shmwin.backends.contract import LimiterBackend, TokenBucketBackend, WindowBackend
from shmwin.backends.redis.testing import ServerTime
from shmwin.backends.shm import native

S = 1_000_000_000
PACKAGE = ROOT / "shmwin"


def protocol_members(protocol: type) -> set[str]:
    """The public names a Protocol asks for, its bases' included (StoreBackend's lifecycle)."""
    return {n for base in protocol.__mro__ if base not in (object, Protocol, Generic)
            for n in vars(base) if not n.startswith("_")}  # fmt: skip


# -- no import cycle ---------------------------------------------------------------------------


def _module_names(root: Path = ROOT) -> dict[str, str]:
    """``{dotted module name: path}`` for every module of the package under ``root`` (native ones too)."""
    found = {}
    package = root / "shmwin"
    for path in [*package.rglob("*.py"), *package.rglob("*.so")]:
        parts = list(path.relative_to(root).parts)
        parts[-1] = parts[-1].split(".")[0]  # _core.cpython-311-x86_64-linux-gnu.so -> _core
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = str(path)
    return found


def _imports(module: str, path: str, modules: dict[str, str]) -> set[str]:
    """The package's modules that ``module`` imports anywhere (top level, functions, classes)."""
    if not path.endswith(".py"):
        return set()  # a native module imports nothing of the package
    is_package = path.endswith("__init__.py")
    out = set()
    for node in ast.walk(ast.parse(Path(path).read_text(), path)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` imports mod
            named = [f"{source}.{a.name}" for a in node.names]
            targets = [m if m in modules else source for m in named]
        else:
            continue
        out |= {t for t in targets if t in modules and t != module}
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.unit
def test_the_package_has_no_import_cycle():
    modules = _module_names()
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    assert graph["shmwin.window"] >= {"shmwin.backends"}  # the graph sees what it should
    assert "shmwin.backends.redis" in graph["shmwin.backends"]  # function-level imports too
    assert _cycles(graph) == []


@pytest.mark.unit
def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.unit
def test_the_backends_import_no_front_and_the_policy_no_backend():
    modules = _module_names()
    for module, path in modules.items():
        imported = _imports(module, path, modules)
        if module.startswith("shmwin.backends."):
            assert not imported & {"shmwin.window", "shmwin.limiter"}, module
        if module in ("shmwin.policy", "shmwin.geometry", "shmwin.backends.contract"):
            assert not any(m.startswith("shmwin.backends.") for m in imported - {"shmwin.backends.contract"})
            assert "shmwin.backends.shm.native" not in imported, module


# -- the layers: what lives in the shared-memory backend stays there ----------------------------

SHM = "shmwin.backends.shm"
ENGINE_ATTRS = {"_core", "_lay"}  # the native type and the byte layout of a shared-memory window
BACKEND_INTERNALS = {f"{SHM}.format", f"{SHM}.layout", f"{SHM}.native", "shmwin._core"}


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _private_reaches(path: str) -> Iterator[tuple[int, str]]:
    """``(line, what)`` of each reach into an engine: ``x._core``, ``x._lay``, or a private
    attribute of a front's backend (``x._backend._keyed``)."""
    for node in ast.walk(ast.parse(Path(path).read_text(), path)):
        if not isinstance(node, ast.Attribute):
            continue
        if node.attr in ENGINE_ATTRS:
            yield node.lineno, f".{node.attr}"
        elif (
            node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "_backend"
        ):
            yield node.lineno, f"._backend.{node.attr}"


def _layer_breaks(root: Path) -> list[str]:
    """Every break of the layers' "never" rules in the package under ``root``:
    outside ``backends/shm/``, no reach into an engine's private attributes and no import of
    its byte format, layout, native type or core; ``backends.redis`` imports nothing of
    ``backends.shm``; the inspector imports no adapter of ``integrations``."""
    modules = _module_names(root)
    breaks = []
    for module, path in sorted(modules.items()):
        if not path.endswith(".py") or _inside(module, SHM):
            continue
        breaks += [f"{module}:{line} reaches {what}" for line, what in _private_reaches(path)]
        imported = _imports(module, path, modules)
        internals = BACKEND_INTERNALS - ({"shmwin._core"} if module == "shmwin" else set())
        # (the package's __init__ imports _core only to say, at once, when it is not built)
        breaks += [f"{module} imports {m}" for m in sorted(imported & internals)]
        if _inside(module, "shmwin.backends.redis"):
            breaks += [f"{module} imports {m}" for m in sorted(imported) if _inside(m, SHM)]
        if _inside(module, "shmwin.inspector"):
            breaks += [f"{module} imports {m}" for m in sorted(imported) if _inside(m, "shmwin.integrations")]
    return breaks


@pytest.mark.unit
def test_nothing_outside_the_shm_backend_reaches_into_it():
    assert f"{SHM}.format" in _module_names()  # the byte format lives in the backend it describes
    assert _layer_breaks(ROOT) == []


@pytest.mark.unit
def test_the_layer_checker_finds_each_kind_of_break(tmp_path):
    files = {
        "shmwin/__init__.py": "",
        "shmwin/_core.py": "",
        "shmwin/concurrency.py": "def f(w):\n    return w._backend._core.conc_count('k')\n",
        "shmwin/token_bucket.py": "def f(w):\n    return w._backend._key_states(1)\n",
        "shmwin/ring.py": "from .backends.shm.format import EMPTY_EPOCH\n",
        "shmwin/backends/__init__.py": "",
        "shmwin/backends/shm/__init__.py": "",
        "shmwin/backends/shm/format.py": "",
        "shmwin/backends/shm/window.py": "from . import format\nx = object()._core\n",  # inside: fine
        "shmwin/backends/shm/segment.py": "",
        "shmwin/backends/redis/__init__.py": "",
        "shmwin/backends/redis/client.py": "from ..shm.segment import check_name\n",
        "shmwin/inspector/__init__.py": "",
        "shmwin/inspector/roles.py": "def f():\n    from ..integrations import limits_fixed\n",
        "shmwin/integrations/__init__.py": "",
        "shmwin/integrations/limits_fixed.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _layer_breaks(tmp_path) == [
        "shmwin.backends.redis.client imports shmwin.backends.shm.segment",
        "shmwin.concurrency:2 reaches ._core",
        "shmwin.inspector.roles imports shmwin.integrations.limits_fixed",
        "shmwin.ring imports shmwin.backends.shm.format",
        "shmwin.token_bucket:2 reaches ._backend._key_states",
    ]


@pytest.mark.unit
def test_the_policy_and_the_core_agree_on_on_full():
    assert policy.ON_FULL == native.ON_FULL


# -- one contract, both backends -----------------------------------------------------------------


@pytest.fixture(params=["shm", "redis"])
def url(request) -> str | None:
    return None if request.param == "shm" else request.getfixturevalue("redis_server").url


def _keeps(obj: Any, protocol: type) -> bool:
    """Has ``obj`` every member ``protocol`` names? (Looked up statically: a property that
    raises NotSupportedError is still there.)"""
    members = protocol_members(protocol)
    assert members >= {"close", "unlink"}
    return all(_has(obj, n) for n in members)


def _has(obj: Any, attr: str) -> bool:
    try:
        inspect.getattr_static(obj, attr)
    except AttributeError:
        return False
    return True


def _public(obj: Any) -> set[str]:
    """Public names of an instance, without its class's constructors (classmethods)."""
    names = {n for n in dir(obj) if not n.startswith("_")}
    return {n for n in names if not inspect.ismethod(getattr(type(obj), n, None))}


def test_both_backends_keep_the_protocols_and_every_public_name(redis_server, make_name):
    clock = ServerTime(ManualClock(10**15))  # redis: the server's time
    urls = (None, redis_server.url)
    buckets = [TokenBucket(make_name("t"), "5/minute", burst=5, backend=url) for url in urls]
    try:
        assert all(isinstance(b._backend, TokenBucketBackend) for b in buckets)
    finally:
        for bucket in buckets:
            bucket.unlink()
            bucket.close()
    made = {
        "shm": (Window(make_name("w"), capacity=4, clock=clock), Limiter(make_name("l"), "5/minute")),
        "redis": (
            Window(make_name("w"), capacity=4, clock=clock, backend=redis_server.url),
            Limiter(make_name("l"), "5/minute", backend=redis_server.url),
        ),
    }
    try:
        for window, limiter in made.values():
            assert _keeps(window._backend, WindowBackend)
            assert _keeps(limiter._backend, LimiterBackend)
        assert isinstance(made["shm"][0]._backend, WindowBackend)  # runtime_checkable, where it can
        assert not _keeps(object(), WindowBackend)
        shm_window, shm_limiter = (front._backend for front in made["shm"])
        redis_window, redis_limiter = (front._backend for front in made["redis"])
        assert _public(shm_window) <= _public(redis_window), _public(shm_window) - _public(redis_window)
        assert _public(shm_limiter) <= _public(redis_limiter), _public(shm_limiter) - _public(redis_limiter)
        assert isinstance(shm_limiter.window, WindowBackend)
    finally:
        for front in (*made["shm"], *made["redis"]):
            front.unlink()
            front.close()


def _hit_times_of_buckets(w: Window) -> None:
    with pytest.raises(ValueError, match="keeps buckets"):  # an exact limiter's only
        w.hit_times("k")


# every public name of the fronts, and a call of it: on redis it works or raises NotSupportedError
WINDOW_CALLS: dict[str, Callable[[Window], Any]] = {
    "add": lambda w: w.add(1, key="k"),
    "add_and_total": lambda w: w.add_and_total(1, key="k"),
    "add_many": lambda w: w.add_many(np.ones(3, np.int64), at=np.full(3, 10**15), key="k"),
    "attach": lambda w: Window.attach(w.name, backend=w.url or None).close(),
    "bucket_ns": lambda w: w.bucket_ns,
    "buckets": lambda w: w.buckets,
    "capacity": lambda w: w.capacity,
    "clear": lambda w: w.clear("gone"),
    "close": lambda w: None,  # the fixture closes
    "closed": lambda w: w.closed,
    "create": lambda w: None,  # tested below
    "dtype": lambda w: w.dtype,
    "fields": lambda w: w.fields,
    "full_count": lambda w: w.full_count(),
    "geometry": lambda w: w.geometry,
    "hit_times": lambda w: _hit_times_of_buckets(w),
    "keys": lambda w: w.keys(),
    "last_write_ns": lambda w: w.last_write_ns(),
    "meta": lambda w: w.meta,
    "mode": lambda w: w.mode,
    "name": lambda w: w.name,
    "nbytes": lambda w: w.nbytes,
    "open_geometry": lambda w: Window.open_geometry(w.name, w.geometry, backend=w.url or None).close(),
    "rate": lambda w: w.rate(),
    "reclaim": lambda w: w.reclaim(),
    "reset": lambda w: w.reset(),
    "resolution_for": lambda w: w.resolution_for("1s"),
    "resolutions": lambda w: w.resolutions,
    "series": lambda w: w.series(key="k"),
    "span": lambda w: w.span,
    "span_ns": lambda w: w.span_ns,
    "stripe_owners": lambda w: w.stripe_owners(),
    "stripes": lambda w: w.stripes,
    "top": lambda w: w.top(3),
    "total": lambda w: w.total(key="k"),
    "totals": lambda w: w.totals(),
    "unlink": lambda w: None,  # the fixture unlinks
    "url": lambda w: w.url,
}
REDIS_CANNOT = {"add_many", "hit_times", "last_write_ns", "meta", "nbytes"}  # add_many: only stamped batches


def test_every_public_name_of_window_works_or_says_it_cannot(url, make_name):
    clock = ServerTime(ManualClock(10**15))  # redis: the server's time
    with Window(make_name("w"), span=60, buckets=60, capacity=4, clock=clock, backend=url) as w:
        assert {n for n in dir(w) if not n.startswith("_")} == set(WINDOW_CALLS)
        for name, call in WINDOW_CALLS.items():
            if url is not None and name in REDIS_CANNOT:
                with pytest.raises(shmwin.NotSupportedError, match="redis"):
                    call(w)
            else:
                call(w)
        with pytest.raises(shmwin.WindowExistsError):
            Window.create(w.name, span=60, buckets=60, capacity=4, backend=url)
        w.unlink()
    made = Window.create(make_name("c"), span=60, buckets=60, backend=url, clock=clock)
    made.add(2)
    assert made.total() == 2
    made.unlink()
    made.close()


def test_every_public_name_of_limiter_works_or_says_it_cannot(url, make_name):
    import asyncio

    clock = ServerTime(ManualClock(10**15))  # redis: the server's time
    calls: dict[str, Callable[[Limiter], Any]] = {
        "acquire": lambda lim: lim.acquire("k", timeout=0),
        "acquire_async": lambda lim: asyncio.run(lim.acquire_async("k", timeout=0)),
        "attach": lambda lim: Limiter.attach(lim.name, backend=url).close(),
        "charge": lambda lim: lim.charge("charged", 1),
        "clear": lambda lim: lim.clear("gone"),
        "close": lambda lim: None,
        "closed": lambda lim: lim.closed,
        "decisions": lambda lim: lim.decisions(),
        "full_count": lambda lim: lim.full_count(),
        "hit": lambda lim: lim.hit("k"),
        "local_stats_all": lambda lim: lim.local_stats_all("k"),  # None: no local share here
        "name": lambda lim: lim.name,
        "on_error": lambda lim: lim.on_error,
        "on_full": lambda lim: lim.on_full,
        "rates": lambda lim: lim.rates,
        "refund": lambda lim: lim.refund("k", 1),
        "set_rates": lambda lim: lim.set_rates("6/minute"),
        "shadow": lambda lim: lim.shadow,
        "stats": lambda lim: lim.stats("k"),
        "stats_all": lambda lim: lim.stats_all("k"),
        "test": lambda lim: lim.test("k"),
        "unlink": lambda lim: None,
        "url": lambda lim: lim.url,
        "window": lambda lim: lim.window.total(key="k"),
    }
    with Limiter(make_name("l"), "5/minute", clock=clock, backend=url) as lim:
        assert {n for n in dir(lim) if not n.startswith("_")} == set(calls)
        for name, call in calls.items():
            if url is not None and name == "window":
                with pytest.raises(shmwin.NotSupportedError, match="redis"):
                    call(lim)
            elif url is not None and name == "decisions":
                with pytest.raises(shmwin.NotSupportedError, match="keeps no decisions"):
                    call(lim)
            elif url is not None and name in ("refund", "charge"):  # set_rates: live on redis too
                with pytest.raises(shmwin.NotSupportedError, match="shared memory"):
                    call(lim)
            else:
                call(lim)
        lim.unlink()


# -- every path agrees: the native fast path, the slower ones, redis --------------------------


@dataclass(frozen=True)
class Step:
    """Advance the clock ``advance_s``, then spend ``cost`` for ``key`` (or add it)."""

    advance_s: float
    key: str
    cost: int


def _script() -> list[Step]:
    """Bursts, gaps inside a bucket, across buckets, past a period, and costs of 1 to 4."""
    rng = np.random.default_rng(11)
    gaps = [0, 0, 0.01, 0.05, 0.2, 0.7, 1.3, 3.1, 20.0]
    return [
        Step(float(rng.choice(gaps)), f"k{int(rng.integers(0, 3))}", int(rng.integers(1, 5)))
        for _ in range(400)
    ]


def _hit(lim: Limiter, step: Step) -> bool:
    return lim.hit(step.key, step.cost)


def _acquire(lim: Limiter, step: Step) -> bool:
    return lim.acquire(step.key, timeout=0, cost=step.cost)


def _test_then_hit(lim: Limiter, step: Step) -> bool:
    allowed = lim.test(step.key, step.cost)
    if allowed:
        assert lim.hit(step.key, step.cost)
    return allowed


def _on_both(calls: dict[str, Callable[..., Any]]) -> dict[str, tuple[bool, Callable[..., Any]]]:
    """Each call on shm and on redis, by label: (on redis?, call). The first shm one is the
    reference the others must match: the native fast path."""
    both = [(where, label, call) for where in ("shm", "redis") for label, call in calls.items()]
    return {f"{where} {label}": (where == "redis", call) for where, label, call in both}


LIMITER_PATHS = _on_both({"hit": _hit, "acquire": _acquire, "test, then hit": _test_then_hit})


def _run_limiter(
    rates: str, on_redis: bool, path: Callable[[Limiter, Step], bool], name: str, url: str
) -> Iterator[tuple[Any, ...]]:
    clock = ServerTime(ManualClock(10**15))  # redis: the server's time
    lim = Limiter(name, rates, clock=clock, backend=url if on_redis else None)
    try:
        for i, step in enumerate(_script()):
            clock.advance(step.advance_s)
            yield ("verdict", i, path(lim, step))
            if i % 25 == 0:
                for key in ("k0", "k1", "k2"):
                    stats = lim.stats_all(key)
                    yield ("stats", i, key, [(s.used, s.remaining, round(s.reset_after, 6)) for s in stats])
                    for cost in (2, 11):  # when would it fit? (what acquire sleeps; 11: never)
                        allowed, used, reset_ns, wait_ns = lim._backend.check(key, cost, False)
                        yield ("check", i, key, cost, allowed, list(used), list(reset_ns), wait_ns)
    finally:
        lim.unlink()
        lim.close()


@pytest.mark.integration
@pytest.mark.parametrize("rates", ["5/minute", "3/second;10/minute"])
def test_every_limiter_path_gives_the_same_answers(redis_server, make_name, rates):
    runs = {
        label: list(_run_limiter(rates, on_redis, path, make_name(f"p{i}"), redis_server.url))
        for i, (label, (on_redis, path)) in enumerate(LIMITER_PATHS.items())
    }
    reference = runs.pop("shm hit")
    admitted = sum(1 for event in reference if event[0] == "verdict" and event[2])
    assert 50 < admitted < 350  # the script both admits and refuses
    for label, events in runs.items():
        _assert_same(reference, events, label)


def _add(w: Window, step: Step, clock: ManualClock) -> None:
    w.add(step.cost, "a", key=step.key)
    w.add(1, "b", key=step.key)


def _add_and_total(w: Window, step: Step, clock: ManualClock) -> None:
    before = w.total("a", key=step.key)
    assert w.add_and_total(step.cost, "a", key=step.key) == before + step.cost
    w.add_and_total(1, "b", key=step.key)


def _add_many(w: Window, step: Step, clock: ManualClock) -> None:
    w.add_many(np.ones(step.cost, np.int64), "a", key=step.key)
    w.add_many([1], "b", key=step.key)


def _add_batch(w: Window, step: Step, clock: ManualClock) -> None:
    stamps = np.full(step.cost, clock(), np.int64)
    w.add_many(np.ones(step.cost, np.int64), "a", at=stamps, key=step.key)
    w.add_many([1], "b", at=[clock()], key=step.key)


WINDOW_PATHS = {
    **_on_both({"add": _add, "add_and_total": _add_and_total, "add_many": _add_many}),
    "shm add_many(at=)": (False, _add_batch),
}


def _run_window(on_redis: bool, path: Callable[..., None], name: str, url: str) -> Iterator[tuple[Any, ...]]:
    clock = ServerTime(ManualClock(10**15))  # redis: the server's time
    w = Window(name, span=10, buckets=10, fields=("a", "b"), capacity=8, clock=clock,
               backend=url if on_redis else None)  # fmt: skip
    try:
        for i, step in enumerate(_script()[:200]):
            clock.advance(step.advance_s)
            path(w, step, clock)
            yield ("totals", i, w.totals(), w.totals(key=step.key, last=3))
            if i % 10 == 0:
                yield ("series", i, w.series("a", key="k1").tolist(), sorted(w.top(3, "a")), sorted(w.keys()))
                yield ("rate", i, round(w.rate("b", last=5), 9))
    finally:
        w.unlink()
        w.close()


@pytest.mark.integration
def test_every_window_path_gives_the_same_answers(redis_server, make_name):
    runs = {
        label: list(_run_window(on_redis, path, make_name(f"p{i}"), redis_server.url))
        for i, (label, (on_redis, path)) in enumerate(WINDOW_PATHS.items())
    }
    reference = runs.pop("shm add")
    assert any(event[2]["a"] > 20 for event in reference if event[0] == "totals")
    for label, events in runs.items():
        _assert_same(reference, events, label)


def _assert_same(reference: list[tuple[Any, ...]], events: list[tuple[Any, ...]], label: str) -> None:
    assert len(events) == len(reference), label
    for expected, got in zip(reference, events, strict=True):
        assert got == expected, f"{label} departs from the native fast path: {got} != {expected}"


@pytest.mark.unit
def test_backends_registry_is_plain():
    assert backends.scheme_of(None) == backends.scheme_of("shm://") == "shm"
    assert backends.lookup(None).window.__qualname__ == "ShmWindow.open"
    with pytest.raises(ValueError, match="unknown backend 'memcached://x'"):
        backends.lookup("memcached://x")


@pytest.mark.unit
def test_one_opener_for_every_kind_and_a_missing_kind_says_so_before_anything_opens():
    opened: list[str] = []

    def never(req: Any) -> Any:
        opened.append(req.name)
        raise AssertionError("nothing should open")

    backends.register("nobucket", backends.Scheme(window=never, limiter=never, options=frozenset()))
    with pytest.raises(shmwin.NotSupportedError, match="the nobucket backend has no token bucket"):
        backends.open("token-bucket", "b", None, backend="nobucket://x")
    with pytest.raises(shmwin.NotSupportedError, match="cannot honour perm=384"):
        backends.open("window", "w", None, backend="nobucket://x", perm=0o600)
    with pytest.raises(ValueError, match="kind must be one of"):
        backends.open("counter", "c", None, backend="nobucket://x")
    assert opened == []
    assert backends.lookup(None).opener("token-bucket").__qualname__ == "ShmTokenBucket.open"


@pytest.mark.unit
def test_the_token_bucket_and_role_engines_keep_their_protocols():
    from shmwin.backends.contract import ConcurrencyEngine, CounterEngine, TokenBucketBackend
    from shmwin.backends.redis.token_bucket import RedisTokenBucket
    from shmwin.backends.shm import roles
    from shmwin.backends.shm.token_bucket import ShmTokenBucket

    def keeps(cls: type, protocol: type, given: set[str]) -> bool:  # ``given``: set by __init__
        return all(_has(cls, n) or n in given for n in protocol_members(protocol))

    assert keeps(ShmTokenBucket, TokenBucketBackend, {"name"})
    assert keeps(RedisTokenBucket, TokenBucketBackend, {"name", "url"})
    assert not keeps(ShmTokenBucket, TokenBucketBackend, set())  # the check sees what is missing
    assert all(keeps(engine, CounterEngine, set()) for engine in roles.ENGINES.values())
    assert keeps(roles.ConcurrencyEngine, ConcurrencyEngine, set())
    assert not keeps(roles.FixedEngine, ConcurrencyEngine, set())

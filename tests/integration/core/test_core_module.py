"""The extension module itself: its names and signatures against ``_core.pyi``, the layout the
Core derives from a header against ``layout.Layout.plan``, its module state and heap type, and
a production build with no fail point in it (the test build has them: scripts/checks.d)."""

from __future__ import annotations

import ast
import inspect
import mmap
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.helpers import ROOT, assert_no_fail_point

import shmwin
from shmwin import _core
from shmwin.backends.shm import format as layout_words
from shmwin.backends.shm import header, layout
from shmwin.backends.shm.layout import Layout
from shmwin.geometry import Geometry, Meta, Ring

PYI = ROOT / "shmwin" / "_core.pyi"
TEST_BUILD_ONLY = {"failpoint", "failpoint_fired", "lock_waits"}
MISSING = object()


# -- the .pyi is the module --------------------------------------------------------------------


def _stub() -> ast.Module:
    return ast.parse(PYI.read_text(), str(PYI))


def _stub_params(fn: ast.FunctionDef) -> list[tuple[str, Any, Any]]:
    """``(name, kind, default)`` of each parameter of a stub, ``self`` left out."""
    a = fn.args
    positional = [(p, inspect.Parameter.POSITIONAL_ONLY) for p in a.posonlyargs]
    positional += [(p, inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in a.args]
    defaults = [MISSING] * (len(positional) - len(a.defaults)) + [ast.literal_eval(d) for d in a.defaults]
    out = [(p.arg, kind, d) for (p, kind), d in zip(positional, defaults, strict=True)]
    out += [
        (p.arg, inspect.Parameter.KEYWORD_ONLY, MISSING if d is None else ast.literal_eval(d))
        for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)
    ]
    return [p for p in out if p[0] != "self"]


def _real_params(obj: Any, drop_first: bool) -> list[tuple[str, Any, Any]]:
    params = list(inspect.signature(obj).parameters.values())[1 if drop_first else 0 :]
    return [(p.name, p.kind, MISSING if p.default is p.empty else p.default) for p in params]


def test_every_name_of_the_module_is_in_the_stub_and_back():
    stub = {
        node.name if isinstance(node, ast.FunctionDef | ast.ClassDef) else node.target.id  # type: ignore[union-attr]
        for node in _stub().body
        if isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AnnAssign)
    } - set(_stub_only_bases())
    real = {n for n in dir(_core) if not n.startswith("_")}
    test_build = hasattr(_core, "failpoint")
    assert real == (stub if test_build else stub - TEST_BUILD_ONLY)


def _stub_only_bases() -> dict[str, ast.ClassDef]:
    """The stub's private classes the module has no type for: a base that only says, once, what
    several types share (``_LiveCore``: core.h's LIVE_METHODS). Each type that names one as its
    base is checked for every one of its members, as for its own."""
    return {
        node.name: node
        for node in _stub().body
        if isinstance(node, ast.ClassDef) and node.name.startswith("_") and not hasattr(_core, node.name)
    }


def test_every_signature_of_the_stub_is_the_module_s():
    checked = 0
    stubbed: dict[str, set[str]] = {}  # each class's public names in the stub, its bases' included
    stub_only = _stub_only_bases()
    for node in _stub().body:
        if isinstance(node, ast.FunctionDef) and hasattr(_core, node.name):
            assert _stub_params(node) == _real_params(getattr(_core, node.name), False), node.name
            checked += 1
        if isinstance(node, ast.ClassDef) and node.name in stub_only:  # its members: checked per type
            stubbed[node.name] = set().union(*(stubbed[base.id] for base in node.bases))  # type: ignore[attr-defined]
        elif isinstance(node, ast.ClassDef):
            cls = getattr(_core, node.name)
            members = {}
            bases = [base.id for base in node.bases]  # type: ignore[attr-defined]
            shared = [item for base in bases if base in stub_only for item in stub_only[base].body]
            for item in node.body + shared:
                if isinstance(item, ast.AnnAssign):  # an attribute: the type has it
                    attribute = item.target.id  # type: ignore[union-attr]
                    assert hasattr(cls, attribute), f"{node.name}.{attribute}"
                    members[attribute] = item
                    continue
                assert isinstance(item, ast.FunctionDef)
                members[item.name] = item
                if item.name == "__init__":
                    assert _stub_params(item) == _real_params(cls, False), "Core()"
                elif item.name == "__call__":  # tp_call: a slot wrapper, (*args, **kwargs) to inspect
                    assert callable(cls) and cls.__call__ is not type.__call__, node.name
                elif item.decorator_list:  # a property: a getter of the type
                    assert inspect.isgetsetdescriptor(inspect.getattr_static(cls, item.name)), item.name
                else:
                    assert _stub_params(item) == _real_params(getattr(cls, item.name), True), item.name
                checked += 1
            inherited = set().union(*(stubbed[base.id] for base in node.bases))  # type: ignore[attr-defined]
            stubbed[node.name] = inherited | set(members) - {"__init__", "__call__"}
            public = {n for n in dir(cls) if not n.startswith("_")}
            assert public == stubbed[node.name], node.name
    assert checked >= 20  # 4 module functions, Core(), 3 properties, 12 methods


def _core_types() -> list[type]:
    """The base type and every role's (its subtypes): each a class of the module."""
    return [t for t in vars(_core).values() if isinstance(t, type) and issubclass(t, _core.Core)]


def test_every_method_has_a_text_signature():
    assert len(_core_types()) >= 9  # Core, and the window's, the limiter's and six roles' types
    for core_type in _core_types():
        for name in dir(core_type):
            if not name.startswith("_") and callable(getattr(core_type, name)):
                assert getattr(core_type, name).__text_signature__, (core_type, name)
        assert "timeout_ns" in str(inspect.signature(core_type))
    assert str(inspect.signature(_core.LimiterCore.hit)) == "(self, /, key, cost=1)"
    assert "timeout_ns" in str(inspect.signature(_core.Core))
    assert str(inspect.signature(_core.open)) == str(inspect.signature(_core.Core))


# -- the Core derives the layout from the header, as Layout.plan does ---------------------------


def _geometries() -> list[Geometry]:
    rng = random.Random(19)
    log_limiter = Geometry(
        (Ring(7, 3, 5), Ring(10**9, 2048, 9, log=True)), ("hits",), mode="locked", n_stripes=0, capacity=1000,
        kind="limiter",
    )  # fmt: skip
    widest = Geometry(
        tuple(Ring(10**6 * (i + 1), 10 + i) for i in range(layout.MAX_RINGS)),
        tuple(f"f{i}" for i in range(layout.MAX_FIELDS)), dtype="float64", n_stripes=layout.MAX_STRIPES,
    )  # fmt: skip
    out = [
        Geometry((Ring(10**9, 60),), ("hits",)),
        Geometry((Ring(10**9, 60),), ("hits",), mode="locked", n_stripes=0),
        Geometry((Ring(10**9, 60),), ("hits",), mode="locked", n_stripes=0, capacity=1),
        log_limiter,
        widest,
    ]
    for _ in range(60):
        kind = rng.choice(layout.KINDS)
        keyed = kind == "limiter" or rng.random() < 0.5
        mode = "locked" if keyed else rng.choice(layout.MODES)
        limiter = kind == "limiter"
        rings = tuple(
            Ring(rng.choice([1, 7, 10**6, 10**9]), rng.randint(1, 400),
                 rng.choice([rng.randint(0, 50), 2**31 - 1, 2**31, 2**40]) if limiter else 0,
                 log=limiter and rng.random() < 0.3)
            for _ in range(rng.randint(1, layout.MAX_RINGS))
        )  # fmt: skip
        out.append(Geometry(
            rings, tuple(f"f{i}" for i in range(1 if kind == "limiter" else rng.randint(1, 5))),
            dtype="int64" if kind == "limiter" else rng.choice(layout.DTYPES), mode=mode,
            n_stripes=rng.randint(1, 70) if mode == "striped" else 0,
            capacity=rng.choice([1, 3, 64, 1000]) if keyed else 0, kind=kind,
        ))  # fmt: skip
    return out


def _expected(g: Geometry, lay: Layout) -> dict[str, Any]:
    """What the Core must derive: Layout.plan's figures, and a row's rings when empty."""
    empty = np.zeros(lay.rings_bytes // layout.WORD_BYTES, np.int64)
    for i, (w, r) in enumerate(zip(lay.ring_words, g.rings, strict=True)):
        at = w - lay.ring_words[0]
        if lay.compact(i):  # head, total, zeroed, tail: three EMPTY, then counts of 0
            empty[at : at + 4] = (layout.EMPTY_EPOCH, 0, layout.EMPTY_EPOCH, layout.EMPTY_EPOCH)
        else:  # a log ring's head slots are its header (run position, total, dead entry): all 0s
            first = at + (lay.head_slots if r.log else 0) * lay.slot_words
            end = at + (lay.head_slots + r.n_buckets) * lay.slot_words
            empty[first:end : lay.slot_words] = layout.EMPTY_EPOCH
    assert empty.tobytes() == layout.empty_rings(g, lay)
    return {
        "limiter": g.kind == "limiter", "floats": g.dtype == "float64", "striped": g.mode == "striped",
        "keyed": g.keyed, "n_fields": len(g.fields), "slot_words": lay.slot_words,
        "head_slots": lay.head_slots,
        "rings": tuple((w, r.n_buckets, r.bucket_ns, r.limit, r.log, lay.count_bytes[i])
                       for i, (w, r) in enumerate(zip(lay.ring_words, g.rings, strict=True))),
        "n_locks": g.n_locks, "n_key_locks": g.n_key_locks, "locks_off": lay.locks_off,
        "stripes_off": lay.stripes_off, "keys_off": lay.keys_off, "rows_off": lay.rows_off,
        "row_bytes": lay.row_bytes, "n_rows": lay.n_rows, "key_slots": g.key_slots,
        "index_levels": g.index_levels, "rings_off": lay.ring_words[0] * layout.WORD_BYTES,
        "idle_ns": g.idle_ns, "empty_row": empty.tobytes(),
        "fields": {f: layout.SLOT_VALUES + i for i, f in enumerate(g.fields)},
    }  # fmt: skip


def test_the_core_derives_the_layout_python_plans_for_every_geometry():
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        for g in _geometries():
            lay = Layout.plan(g)
            mm = mmap.mmap(-1, lay.total_bytes)
            mm[: layout.HEADER_BYTES] = header.pack_header(g, lay, Meta(1, 2, 3, bytes(16), os.urandom(16)))
            core = _core.Core(mm, name="plan", timeout_ns=0, claim=lambda: (1, 1), fd=fd)
            assert core.layout == _expected(g, lay), str(g)
            core.close()
            mm.close()
    finally:
        os.close(fd)


def test_a_header_that_does_not_fit_its_mapping_is_refused():
    g = Geometry((Ring(10**9, 60),), ("hits",), mode="locked", n_stripes=0)
    lay = Layout.plan(g)
    page = header.pack_header(g, lay, Meta(1, 2, 3, bytes(16)))
    with pytest.raises(ValueError, match="does not fit"):
        _core.Core(bytearray(page), name="short", timeout_ns=0)
    junk = bytearray(page) + bytes(lay.total_bytes - len(page))
    junk[layout_words.RING_TABLE_OFF + layout_words.RING_ENTRY_FLAGS_OFF] = 0x80  # an unknown ring flag
    with pytest.raises(ValueError, match="impossible ring"):
        _core.Core(junk, name="junk", timeout_ns=0)
    with pytest.raises(TypeError, match="name= and timeout_ns="):
        _core.Core(bytearray(lay.total_bytes), name="x")


# -- the module: PEP 489 / 630 -------------------------------------------------------------------


def test_the_core_type_and_errors_live_in_module_state():
    core_type = _core.Core
    assert core_type.__flags__ & (1 << 9)  # Py_TPFLAGS_HEAPTYPE
    assert core_type.__flags__ & (1 << 10)  # Py_TPFLAGS_BASETYPE: the roles' types are its subtypes
    for role_type in _core_types():  # heap types, immutable, each of the module
        assert role_type.__flags__ & (1 << 9) and role_type.__module__ == "shmwin._core", role_type
        # Py_TPFLAGS_HAVE_GC: each holds Python objects; a type with its own traverse does not
        # inherit the flag, and without it an object is freed as if it had no GC header
        assert role_type.__flags__ & (1 << 14), role_type
        with pytest.raises(TypeError):
            role_type.reset = None
    with pytest.raises(TypeError):
        _core.LimiterCore.hit = None  # immutable
    unborn = _core.WindowCore.__new__(_core.WindowCore)  # never initialised: closed, never a crash
    assert unborn.closed
    with pytest.raises(shmwin.WindowClosedError):
        unborn.add()
    with pytest.raises(shmwin.WindowClosedError):
        unborn.layout  # noqa: B018
    with pytest.raises(shmwin.WindowClosedError):
        core_type.__new__(core_type).reset()


def test_the_production_core_holds_no_fail_point():
    """The extension this suite runs (the in-place build of setup.py's sources): no fail-point
    function, symbol or string, and no environment variable read. The wheel's is checked in
    test_wheel.py; the test build (-DSHMWIN_TEST) is scripts/checks.d/10-failpoints.sh's."""
    if os.environ.get("SHMWIN_EXPECT_CORE"):
        pytest.skip("a run against a test build of the core (scripts/checks.d): fail points are in it")
    assert not TEST_BUILD_ONLY & set(dir(_core))
    assert_no_fail_point(Path(_core.__file__).read_bytes())


# -- on_full: one enum, answered by the core for every role -------------------------------------


def test_on_full_is_one_enum_from_layout_words_to_the_core():
    # the policy's words, the format's enum, layout.h's ON_FULL_* and the value a Core is given
    from shmwin import policy
    from shmwin.backends.shm import native

    assert layout_words.ON_FULL == policy.ON_FULL == native.ON_FULL
    for value, word in enumerate(layout_words.ON_FULL):
        assert _core.LAYOUT[f"ON_FULL_{word.upper()}"] == value == native.on_full_word(word)
    with pytest.raises(ValueError, match="on_full is one of"):
        native.on_full_word("ignore")


def _full_counter(name: str, role: str, on_full: str) -> tuple[shmwin.Window, Any]:
    """A limits counter segment of room for 2 keys under a clock that never moves (no key goes
    idle): a third key finds the table full."""
    from shmwin.integrations import limits_fixed, limits_moving, limits_sliding

    period_ns = 60 * 10**9
    want = {
        "fixed": limits_fixed.geometry(period_ns, 2),
        "sliding": limits_sliding.geometry(period_ns, 2),
        "moving": limits_moving.geometry(5, period_ns, 5, 2),
    }[role]
    w = shmwin.Window.open_geometry(name, want, clock=shmwin.ManualClock(), on_full=on_full)
    return w, w._backend._core  # type: ignore[attr-defined]


def _counter_hit(core: Any, role: str, key: str) -> Any:
    if role == "fixed":
        return core.fixed_incr(key, 1000)
    if role == "sliding":
        return core.sliding_hit(key, 5000, 1000)
    return core.moving_hit(key, 1)


@pytest.mark.parametrize("role", ["fixed", "sliding", "moving"])
def test_the_core_answers_on_full_for_limits_counters(name, role):
    # limits' fixed window, sliding counter and moving window: "allow" admits a new key of a
    # full table uncounted, "deny" refuses it, "raise" raises; keys in the table stay exact
    answers = {}
    for on_full in layout_words.ON_FULL:
        w, core = _full_counter(f"{name}-{on_full}", role, on_full)
        try:
            for key in ("a", "b"):
                _counter_hit(core, role, key)
            if on_full == "raise":
                with pytest.raises(shmwin.KeyTableFullError):
                    _counter_hit(core, role, "c")
            else:
                answers[on_full] = _counter_hit(core, role, "c")
            if role == "fixed":  # a key the table holds still counts, exactly
                assert _counter_hit(core, role, "a")[0] == 2000
        finally:
            w.close()
            w.unlink()
    if role == "fixed":  # (count after the incr, end ns): nothing counted, or over any limit
        assert answers["allow"][0] == 0
        assert answers["deny"][0] == layout_words.FULL_DENY_COUNT == _core.LAYOUT["FULL_DENY_COUNT"]
        assert answers["allow"][1] == answers["deny"][1] == 60 * 10**9  # a window that would start now
    else:
        assert answers == {"allow": True, "deny": False}


def test_a_concurrency_full_table_raises_whatever_on_full_says(name):
    # a slot admitted with no holder entry could never be released, and a refusal would read
    # as a busy key the caller waits on: the core raises for every on_full
    from shmwin import concurrency

    for on_full in layout_words.ON_FULL:
        want = concurrency.geometry(1, 4, 10**9, 2)
        clock = shmwin.ManualClock()
        w = shmwin.Window.open_geometry(f"{name}-{on_full}", want, clock=clock, on_full=on_full)
        core: Any = w._backend._core  # type: ignore[attr-defined]
        try:
            assert core.conc_acquire("a")[0] and core.conc_acquire("b")[0]
            with pytest.raises(shmwin.KeyTableFullError):
                core.conc_acquire("c")
        finally:
            w.close()
            w.unlink()


# -- _core.open: a segment's type, by its header's kind and role words -----------------------------


def test_open_builds_each_segment_the_type_of_its_role(name):
    """Every role's segment, made by its own front, gets its role's type from _core.open: the
    role's methods and the base's, and no other role's."""
    from shmwin.backends.shm.roles.cache import geometry as counter_cache_geometry
    from shmwin.geometry import LEASE_ROLE, lease_geometry
    from shmwin.integrations import limits_fixed, limits_moving, limits_sliding

    clock = shmwin.ManualClock()
    period_ns = 60 * 10**9
    rate = shmwin.Rate(5, period_ns)
    made = {
        "plain": (shmwin.Window(name + "-w", span="1m", buckets=6, capacity=8), _core.WindowCore),
        "striped": (shmwin.Window(name + "-s", span="1m", buckets=6), _core.WindowCore),
        "limiter": (shmwin.Limiter(name + "-l", "5/minute", clock=clock), _core.LimiterCore),
        "tokens": (shmwin.TokenBucket(name + "-t", "5/minute", burst=5, clock=clock), _core.TokenBucketCore),
        "concurrency": (shmwin.Concurrency(name + "-c", 2), _core.ConcurrencyCore),
    }
    for role, want, core_type in (
        ("fixed", limits_fixed.geometry(period_ns, 4), _core.FixedWindowCore),
        ("sliding", limits_sliding.geometry(period_ns, 4), _core.SlidingCounterCore),
        ("moving", limits_moving.geometry(5, period_ns, 5, 4), _core.MovingLogCore),
        (LEASE_ROLE, lease_geometry([rate], 4), _core.LeaseCore),
        ("counter-cache", counter_cache_geometry(period_ns, 4), _core.CounterCacheCore),
    ):
        made[role] = (shmwin.Window.open_geometry(f"{name}-{role}", want, clock=clock), core_type)
    methods = {  # one method each role's type has, and no other type
        _core.WindowCore: "add", _core.LimiterCore: "refund", _core.TokenBucketCore: "token_hit",
        _core.ConcurrencyCore: "conc_acquire", _core.FixedWindowCore: "fixed_incr",
        _core.SlidingCounterCore: "sliding_hit", _core.MovingLogCore: "moving_hit",
        _core.LeaseCore: "lease_spend", _core.CounterCacheCore: "counter_add",
    }  # fmt: skip
    try:
        for role, (front, core_type) in made.items():
            window = getattr(front, "window", front)
            core = getattr(window, "_backend", window)._core
            assert type(core) is core_type and isinstance(core, _core.Core), role
            assert {t for t, m in methods.items() if hasattr(core, m)} == {core_type}, role
    finally:
        for front, _ in made.values():
            front.unlink()  # its decisions window too
            front.close()

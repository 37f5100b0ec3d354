"""The redis backend's Lua scripts: documented files shipped as package data, none inline in Python."""

from __future__ import annotations

import ast
import re
from importlib import resources

import pytest
from support.helpers import ROOT

from shmwin.backends.redis import scripts

PACKAGE_DIR = ROOT / "shmwin" / "backends" / "redis"
LUA_DIR = PACKAGE_DIR / "lua"
LIBRARIES = set(scripts.LIBRARIES)  # put in front of other scripts, never run alone


def _header(text: str) -> str:
    """The comment block a file begins with."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def _code(text: str) -> str:
    """The file without its comments."""
    return "\n".join(line.split("--", 1)[0] for line in text.splitlines())


def _all_scripts() -> list[scripts.Script]:
    found = [v for v in vars(scripts).values() if isinstance(v, scripts.Script)]
    return [*found, scripts.hit_one(63_001, 3_000_000, 21)]


@pytest.mark.unit
def test_the_lua_directory_holds_exactly_the_scripts_the_code_uses():
    on_disk = sorted(p.name for p in LUA_DIR.glob("*.lua"))
    assert on_disk == sorted(scripts.FILES)
    named_in_python = set()
    for py in PACKAGE_DIR.glob("*.py"):
        named_in_python |= set(re.findall(r"[\"']([\w-]+\.lua)[\"']", py.read_text()))
    assert named_in_python <= set(scripts.FILES), named_in_python - set(scripts.FILES)
    assert {s.name for s in _all_scripts()} | LIBRARIES == set(scripts.FILES)


@pytest.mark.unit
@pytest.mark.parametrize("filename", scripts.FILES)
def test_every_script_begins_with_a_header_naming_its_keys_and_argv(filename):
    text = (LUA_DIR / filename).read_text("utf-8")
    assert text.isascii(), f"{filename}: keep the scripts ASCII (the SHA is of their bytes)"
    header = _header(text)
    assert header.startswith(f"-- {filename}: "), f"{filename} does not begin with '-- {filename}: ...'"
    assert re.search(r"^-- KEYS", header, re.M), f"{filename}: the header names no KEYS"
    assert re.search(r"^-- ARGV\[1\] ", header, re.M), f"{filename}: the header names no ARGV"
    body = _code(text[len(header) :])
    for table in ("KEYS", "ARGV"):
        for index in sorted(set(re.findall(rf"\b{table}\[(\d+)\]", body))):
            entry = re.search(rf"^-- {table}\[{index}\]\s+(\S.*)$", header, re.M)
            assert entry, f"{filename} uses {table}[{index}] but its header does not say what it is"
    if filename not in LIBRARIES:
        assert re.search(r"^-- Returns: \S", header, re.M), f"{filename}: no 'Returns:' in the header"
        assert re.search(r"^-- Guarantees: .*atomic.*one round trip", header, re.M), filename


@pytest.mark.unit
def test_time_arguments_name_their_units():
    for filename in scripts.FILES:
        header = _header((LUA_DIR / filename).read_text("utf-8"))
        for line in re.findall(r"^-- ARGV\[.*$", header, re.M):
            if re.search(r"\b(now|width|span in|time to live)\b", line):
                assert re.search(r"microseconds|milliseconds", line), f"{filename}: {line!r} has no unit"


@pytest.mark.unit
def test_importlib_resources_finds_every_script():
    root = resources.files("shmwin.backends.redis").joinpath("lua")
    for filename in scripts.FILES:
        assert root.joinpath(filename).is_file(), filename
        assert scripts.source(filename) == (LUA_DIR / filename).read_text("utf-8")


@pytest.mark.unit
def test_pyproject_ships_the_lua_files_as_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    globs = data.get("shmwin.backends.redis", [])
    shipped = {p.name for g in globs for p in PACKAGE_DIR.glob(g)}
    assert set(scripts.FILES) <= shipped, f"package-data leaves out {set(scripts.FILES) - shipped}"


@pytest.mark.unit
def test_the_window_reads_share_one_loop():
    lib = (LUA_DIR / scripts.WINDOW_LIB).read_text()
    assert "local function add_row(" in lib and "local function live_keys(" in lib
    for filename in ("read.lua", "top.lua"):
        code = _code((LUA_DIR / filename).read_text())
        assert "add_row(" in code and "HGETALL" not in code and "ZRANGEBYSCORE" not in code, filename
    for script in (scripts.ADD, scripts.READ, scripts.KEYS, scripts.TOP):
        assert script.text.startswith(scripts.source(scripts.WINDOW_LIB)), script.name


_LUA = re.compile(r"redis\.p?call\(|tonumber\(|^\s*local\s+\w+\s*=|^\s*(if|elseif)\s.+\sthen\s*$", re.M)


@pytest.mark.unit
def test_no_script_text_is_left_inline_in_python():
    for py in sorted((ROOT / "shmwin").rglob("*.py")):
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not _LUA.search(node.value), f"{py.relative_to(ROOT)}:{node.lineno} holds Lua"
    assert not (ROOT / "shmwin" / "redis_backend.py").exists()
    assert not (ROOT / "shmwin" / "backends.py").exists()


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The absolute modules an import statement in shmwin/backends/redis/*.py names."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = "shmwin" if node.level == 3 else "?"  # ... = shmwin; . and .. stay inside backends
    if node.level == 0:
        return [node.module or ""]
    if node.module:
        return [f"{base}.{node.module}"]
    return [f"{base}.{a.name}" for a in node.names]


@pytest.mark.unit
def test_the_backend_does_not_import_window_or_limiter():
    for py in sorted(PACKAGE_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(py.read_text(), str(py))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            cycle = [m for m in _imported(node) if re.fullmatch(r"shmwin\.(window|limiter)(\..*)?", m)]
            assert not cycle, f"{py.name}:{node.lineno} imports {cycle}"


def test_every_script_compiles_on_redis_and_has_the_sha_the_code_sends(redis_server):
    redis = pytest.importorskip("redis")
    client = redis.Redis.from_url(redis_server.url)
    try:
        for script in _all_scripts():
            assert client.script_load(script.text) == script.sha, script.name
    finally:
        client.close()


def test_scripts_are_loaded_again_after_a_script_flush(redis_server, name):
    redis = pytest.importorskip("redis")
    from shmwin import Limiter, Window

    client = redis.Redis.from_url(redis_server.url)
    with (
        Window(name + "w", span=10, buckets=10, capacity=10, backend=redis_server.url) as w,
        Limiter(name + "l", "5/minute", backend=redis_server.url) as lim,
        Limiter(name + "m", "5/minute;50/hour", backend=redis_server.url) as multi,
    ):
        for round_ in range(2):
            client.script_flush()
            w.add(2, key="k")
            assert w.total(key="k") == 2 * (round_ + 1) and w.keys() == ["k"]
            assert w.top(1) == [("k", 2 * (round_ + 1))]
            assert lim.hit("k") and multi.hit("k")
        assert lim.stats("k").used == 2 and multi.stats("k").used == 2
        for obj in (w, lim, multi):
            obj.unlink()
    client.close()

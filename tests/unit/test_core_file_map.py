"""The native core's maps -- the one at the top of core/module.c and the one in docs/internals.md --
held to the tree: every file on disk is named in both, none that is gone, and the calls drawn
between files are the calls the files make. A file added, split or renamed without its map
fails here. Also the size target of issue 28: no hand-written C file over 600 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "shmwin" / "backends" / "shm" / "core"
MODULE_C = CORE / "module.c"
INTERNALS = ROOT / "docs" / "internals.md"
GENERATED = {"layout.h"}  # written by shmwin's layout generator, not by hand
MAX_LINES = 600

# A function definition at column 0 that is not static: its name, the brace after its (possibly
# multi-line) parameter list. Static functions cannot be called from another file.
DEFINITION = re.compile(r"^(?!static\b)(?!#)[A-Za-z_][\w \*]*?\b(\w+)\([^;{}]*\)\s*\{", re.M)
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
CALL_LINE = re.compile(r"^(\w+\.c) ->((?: \w+\.c)*)$")


def source_files() -> set[str]:
    return {p.name for p in CORE.iterdir() if p.suffix in (".c", ".h")}


def calls_in_code() -> dict[str, list[str]]:
    """a.c -> the other files whose functions a.c calls (by name, comments stripped)."""
    texts = {p.name: COMMENT.sub("", p.read_text()) for p in sorted(CORE.glob("*.c"))}
    defined_in = {name: f for f, text in texts.items() for name in DEFINITION.findall(text)}
    graph = {}
    for f, text in texts.items():
        called = {g for name, g in defined_in.items() if g != f and re.search(rf"\b{name}\(", text)}
        graph[f] = sorted(called)
    return graph


def drawn_calls(lines: list[str]) -> dict[str, list[str]]:
    graph = {}
    for line in lines:
        m = CALL_LINE.match(line.strip())
        if m:
            graph[m.group(1)] = m.group(2).split()
    return graph


def module_map() -> tuple[set[str], dict[str, list[str]]]:
    head = MODULE_C.read_text().split("*/", 1)[0]
    files = set(re.findall(r"^ \*   (\w+\.[ch])  ", head, re.M))
    block = head.split("CALLS-BEGIN", 1)[1].split("CALLS-END", 1)[0]
    return files, drawn_calls([line.lstrip(" *") for line in block.splitlines()])


def docs_map() -> tuple[set[str], dict[str, list[str]]]:
    text = INTERNALS.read_text()
    section = text.split("## The native core", 1)[1].split("\n## ", 1)[0]
    files = set(re.findall(r"`(\w+\.[ch])`", section))
    block = section.split("<!-- calls-begin -->", 1)[1].split("<!-- calls-end -->", 1)[0]
    return files, drawn_calls(block.splitlines())


MAPS = {"module.c": module_map, "docs/internals.md": docs_map}  # where each map is drawn


@pytest.mark.parametrize("where", sorted(MAPS))
def test_the_map_names_every_file_of_the_core_and_no_other(where: str) -> None:
    files, _ = MAPS[where]()
    assert files == source_files()


@pytest.mark.parametrize("where", sorted(MAPS))
def test_the_calls_drawn_in_the_map_are_the_calls_the_files_make(where: str) -> None:
    _, drawn = MAPS[where]()
    assert drawn == calls_in_code()


def test_the_graph_finds_calls_across_files() -> None:
    # the parser itself: a keyed limiter method reaches the index and the rows
    graph = calls_in_code()
    assert {"index.c", "rings.c"} <= set(graph["limiter.c"])
    assert "keys.c" in graph["keycache.c"]


def test_no_hand_written_file_of_the_core_is_over_600_lines() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in CORE.iterdir() if p.suffix in (".c", ".h")}
    over = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in GENERATED}
    assert over == {}


def test_no_file_of_the_core_reaches_itself_through_its_calls() -> None:
    """Issue 28: no circle of calls for a newcomer to hold in their head. A role's needs of the
    shared code go through its hooks (core.h, RoleHooks), which are not calls by name."""
    graph = calls_in_code()

    def reached(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            f = todo.pop()
            if f not in seen:
                seen.add(f)
                todo.extend(graph.get(f, []))
        return seen

    assert [f for f in graph if f in reached(f)] == []


FUNCTION = re.compile(r"^(?:static\s+)?(?:inline\s+)?[A-Za-z_][\w \*]*?\b(\w+)\(([^;{}]*)\)\s*\{", re.M)
HOOKS = re.compile(r"RoleHooks \w+ = \{(.*?)\};", re.S)
ROLE_TEST = re.compile(r"->role\b|\bROLE_[A-Z_]+\b|\bIS_MOVING\b|->limiter\s*&&\s*c->role")


def _functions(text: str) -> dict[str, str]:
    """Each function's name and body (comments stripped: braces in strings are balanced here)."""
    bodies = {}
    for m in FUNCTION.finditer(text):
        depth, at = 1, m.end()
        while depth and at < len(text):  # to the brace that closes the signature's
            depth += {"{": 1, "}": -1}.get(text[at], 0)
            at += 1
        bodies[m.group(1)] = text[m.end() : at]
    return bodies


def test_a_role_word_is_read_at_open_only_never_in_a_method() -> None:
    """Issue 28: per-role types, no run-time role checks. A role word is compared only where a
    segment is opened: module.c's table and open(), the header's read, and the hooks a role's
    type runs at open (its header and check hooks, and what they call)."""
    at_open = {"read_header", "role_row", "role_has_type", "open_segment",
               "read_geometry"}  # series.c: its own types (not Core's) read their header at init
    texts = {p.name: COMMENT.sub("", p.read_text()) for p in sorted(CORE.glob("*.c"))}
    for text in texts.values():
        for init in HOOKS.findall(text):
            at_open |= set(re.findall(r"\.(?:header|check) = (\w+)", init))
    bodies = {name: body for text in texts.values() for name, body in _functions(text).items()}
    called_at_open = {name for name in bodies for caller in at_open
                      if caller in bodies and re.search(rf"\b{name}\(", bodies[caller])}  # fmt: skip
    testing = {name for name, body in bodies.items() if ROLE_TEST.search(body)}
    assert testing, "the scan found no role test at all: its patterns are stale"
    assert testing <= at_open | called_at_open, testing - at_open - called_at_open

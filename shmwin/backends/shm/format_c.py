"""``layout.h``, the native core's copy of the format, written from the one description
(``format.py`` and its row tables, ``format_rows.py``): every constant as a ``#define``, the
header page and a ring table entry as structs, ``_Static_assert`` s on every offset and size.
The header is committed and ``tests/unit/test_layout.py`` holds it fresh; after a change to the
format, write it anew::

    python shmwin/backends/shm/format_c.py shmwin/backends/shm/core/layout.h

Run by path, it loads the format modules (stdlib only, importing only each other and
``shmwin/geometry.py``) as the package's modules with none of the package's ``__init__`` run, so it
needs no built core and no importable shmwin.
"""

from __future__ import annotations

import re
import sys

if __name__ == "__main__" and not __package__:  # run by path: the package's folders, none of their __init__s
    import types
    from pathlib import Path

    _here = Path(__file__).resolve().parent  # shmwin/backends/shm: the format needs shmwin/geometry.py too
    for _name, _folder in (
        ("shmwin", _here.parents[1]),
        ("shmwin.backends", _here.parent),
        ("shmwin.backends.shm", _here),
    ):
        _package = types.ModuleType(_name)
        _package.__path__ = [str(_folder)]
        sys.modules[_name] = _package
    __package__ = "shmwin.backends.shm"

from .format import (
    HEADER,
    RECORDS,
    RING_ENTRY,
    RING_ENTRY_BYTES,
    Field,
    check,
    constants,
    size_of,
)

_C_TYPES = {"q": "int64_t", "Q": "uint64_t", "I": "uint32_t"}


def _c_value(value: int) -> str:
    if value == -(1 << 63):
        return "(-INT64_C(9223372036854775807) - 1)"
    if -(1 << 31) <= value < 1 << 31:
        return str(value)
    return f"INT64_C({value})"


def _c_struct(name: str, fields: tuple[Field, ...], size: int | None) -> list[str]:
    lines, at, pad = ["typedef struct {  /* generated: offsets asserted below */"], 0, 0
    for field, offset, kind in fields:
        if offset > at:
            lines.append(f"    uint8_t pad{pad}[{offset - at}];")
            pad += 1
        need = size_of(kind)
        ring = re.fullmatch(r"ring\[(\d+)\]", kind)
        if kind in _C_TYPES:
            lines.append(f"    {_C_TYPES[kind]} {field};")
        elif ring:
            lines.append(f"    ShmwinRingEntry {field}[{ring.group(1)}];")
        else:
            lines.append(f"    uint8_t {field}[{need}];")
        at = offset + (need or 0)
    if size is not None and size > at:
        lines.append(f"    uint8_t pad{pad}[{size - at}];")
    lines.append(f"}} {name};")
    for field, offset, _ in fields:
        lines.append(f'_Static_assert(offsetof({name}, {field}) == {offset}, "{name}.{field}");')
    if size is not None:
        lines.append(f'_Static_assert(sizeof({name}) == {size}, "{name}: its size");')
    return lines


def _mutex_rooms() -> list[str]:
    """A record's mutex in its room up to the next field: the one fit only the compiler knows
    (``sizeof(pthread_mutex_t)`` is the platform's). Every other field's fit before the next is
    :func:`format.check`'s, run before this file is written, so it is not asserted twice."""
    lines = [
        "/* Records read word by word: each mutex in its room (format.check() fits every other field). */"
    ]
    for prefix, (fields, size_name) in RECORDS.items():
        for i, (name, _offset, kind) in enumerate(fields):
            if kind != "mutex":
                continue
            after = fields[i + 1] if i + 1 < len(fields) else None
            end = size_name if after is None or after[0] == "reserved" else f"{prefix}_{after[0].upper()}_OFF"
            room = f"{prefix}_{name.upper()}_OFF + sizeof(pthread_mutex_t) <= {end}"
            lines.append(f'_Static_assert({room}, "{prefix}.{name}");')
    return lines


def c_header() -> str:
    """``layout.h``: every constant of :func:`constants` as a ``#define``, the header page and a
    ring table entry as structs, and ``_Static_assert`` s on every offset and size."""
    values = constants()
    out = [
        "/* GENERATED from shmwin/backends/shm/format.py by format_c.py: do not edit. To write it anew:",
        " *     python shmwin/backends/shm/format_c.py shmwin/backends/shm/core/layout.h",
        " * tests/unit/test_layout.py holds it fresh; _core.LAYOUT hands these values back. */",
        "#ifndef SHMWIN_LAYOUT_H",
        "#define SHMWIN_LAYOUT_H",
        "",
        "#include <pthread.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "",
    ]
    width = max(len(n) for n in values)
    out += [f"#define {name.ljust(width)} {_c_value(v)}" for name, v in values.items()]
    out += ["", "/* Every constant above, for _core.LAYOUT: X(name) for each. */"]
    out += ["#define SHMWIN_LAYOUT_NAMES(X) \\"]
    out += [f"    X({name}) \\" for name in values]
    out += ["    /* end */", ""]
    out += _c_struct("ShmwinRingEntry", RING_ENTRY, RING_ENTRY_BYTES)
    out += [""]
    out += _c_struct("ShmwinHeader", HEADER, None)
    out += ["", *_mutex_rooms()]
    out += [
        '_Static_assert(KEY_ROW_KEY_OFF + MAX_STORED_KEY == KEY_HEADER_BYTES, "a key row\'s key bytes");',
        '_Static_assert(KEY_LONG_PREFIX + KEY_DIGEST_BYTES == MAX_STORED_KEY, "a long key");',
        '_Static_assert(sizeof(ShmwinHeader) <= HEADER_BYTES, "the header page");',
        "",
        "#endif /* SHMWIN_LAYOUT_H */",
        "",
    ]
    return "\n".join(out)


if __name__ == "__main__":
    problems = check()
    if problems:
        sys.exit("format: " + "; ".join(problems))
    text = c_header()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)

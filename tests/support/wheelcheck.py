"""What a shipped wheel must be, checked from its bytes (no readelf, objdump or pyelftools).

- its platform tag is manylinux_2_17 (manylinux2014) for the machine its extension is built for;
- it ships no C source (``.c``, ``.h``): those stay in the sdist; it ships the LICENSE text;
- each extension carries no debug info (no ``.debug_*`` section, no ``.symtab``), asks for no
  symbol version newer than GLIBC_2.17, links only libraries every glibc system has, and no
  RPATH or RUNPATH from the machine that built it.

scripts/wheels runs it on every wheel it makes (``python tests/support/wheelcheck.py WHEEL...``: one line
per wheel, exit 1 on any problem); tests/integration/wheels/test_wheel.py imports it.
"""

from __future__ import annotations

import re
import struct
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

GLIBC_MAX = (2, 17)
MACHINES = {62: "x86_64", 183: "aarch64"}  # ELF e_machine
# what manylinux2014 lets an extension link (PEP 599), less what shmwin has no use for
ALLOWED_LIBS = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"}
_SHT_DYNAMIC, _SHT_VERNEED = 6, 0x6FFFFFFE
_DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 1, 15, 29


@dataclass
class Elf:
    machine: str
    sections: list[str]
    needed: list[str] = field(default_factory=list)
    rpaths: list[str] = field(default_factory=list)
    versions: set[str] = field(default_factory=set)  # every symbol version asked for: GLIBC_2.14, ...

    def glibc_max(self) -> tuple[int, ...]:
        found = [tuple(map(int, v[6:].split("."))) for v in self.versions if re.fullmatch(r"GLIBC_[\d.]+", v)]
        return max(found, default=(0,))


def _cstr(data: bytes, at: int) -> str:
    return data[at : data.index(b"\0", at)].decode()


def parse_elf(data: bytes) -> Elf:
    """The facts above from a little-endian ELF64 shared object."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a little-endian ELF64 file")
    (_, _, machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, shstrndx) = struct.unpack_from(
        "<16sHHIQQQIHHHHHH", data
    )
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_off = headers[shstrndx][4]
    elf = Elf(MACHINES.get(machine, str(machine)), [_cstr(data, names_off + h[0]) for h in headers])
    for _name, kind, _, _, off, size, link, info, _, _ in headers:
        strings = headers[link][4] if link < len(headers) else 0
        if kind == _SHT_DYNAMIC:
            for at in range(off, off + size, 16):
                tag, val = struct.unpack_from("<qQ", data, at)
                if tag == _DT_NEEDED:
                    elf.needed.append(_cstr(data, strings + val))
                elif tag in (_DT_RPATH, _DT_RUNPATH):
                    elf.rpaths.append(_cstr(data, strings + val))
        elif kind == _SHT_VERNEED:
            at = off
            for _ in range(info):  # Elf64_Verneed, each with vn_cnt Elf64_Vernaux
                _, count, _, aux, next_need = struct.unpack_from("<HHIII", data, at)
                at_aux = at + aux
                for _ in range(count):
                    _, _, _, name, next_aux = struct.unpack_from("<IHHII", data, at_aux)
                    elf.versions.add(_cstr(data, strings + name))
                    at_aux += next_aux
                at += next_need
    return elf


def wheel_problems(path: Path) -> list[str]:
    """Everything wrong with the wheel at ``path``, as sentences; [] for a good one."""
    problems = []
    tags = path.name.removesuffix(".whl").split("-")[-1].split(".")
    archs = {t.removeprefix("manylinux_2_17_") for t in tags if t.startswith("manylinux_2_17_")}
    if not archs:
        problems.append(f"{path.name}: not tagged manylinux_2_17 ({'.'.join(tags)})")
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
        sources = [n for n in names if n.endswith((".c", ".h"))]
        if sources:
            problems.append(f"{path.name}: ships C source {sources}")
        if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
            problems.append(f"{path.name}: ships no LICENSE (the MIT text) in its .dist-info/licenses/")
        libraries = [n for n in names if n.endswith(".so")]
        if not libraries:
            problems.append(f"{path.name}: has no extension module")
        for name in libraries:
            elf = parse_elf(whl.read(name))
            where = f"{path.name}: {name}"
            debug = [s for s in elf.sections if s.startswith(".debug_") or s == ".symtab"]
            if debug:
                problems.append(f"{where} is not stripped: {debug}")
            if elf.glibc_max() > GLIBC_MAX:
                newer = sorted(v for v in elf.versions if v.startswith("GLIBC_"))
                problems.append(f"{where} needs glibc {elf.glibc_max()} > {GLIBC_MAX}: {newer}")
            if set(elf.needed) - ALLOWED_LIBS:
                problems.append(f"{where} links {sorted(set(elf.needed) - ALLOWED_LIBS)}")
            if elf.rpaths:
                problems.append(f"{where} has an RPATH/RUNPATH {elf.rpaths}")
            if archs and elf.machine not in archs:
                problems.append(f"{where} is built for {elf.machine}, tagged {sorted(archs)}")
    return problems


def main(paths: list[str]) -> int:
    bad = 0
    for arg in paths:
        path = Path(arg)
        problems = wheel_problems(path)
        for problem in problems:
            print(f"BAD {problem}")
        if not problems:
            with zipfile.ZipFile(path) as whl:
                elfs = [parse_elf(whl.read(n)) for n in whl.namelist() if n.endswith(".so")]
            glibc = ".".join(map(str, max(e.glibc_max() for e in elfs)))
            libs = sorted({n for e in elfs for n in e.needed})
            print(f"ok  {path.name}: {path.stat().st_size // 1024} KiB, no C source, stripped, "
                  f"glibc >= {glibc}, links {libs}")  # fmt: skip
        bad += bool(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

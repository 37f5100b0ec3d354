"""Build the one native module, shmwin._core (the critical sections); the rest is pyproject.toml.

CORE_SOURCES is the one list of its C sources (every ``*.c`` under shmwin/, headers beside them
as dependencies): scripts/wheels and the checks build through this file, never name a ``.c``.
A wheel's extension is linked stripped (no debug info); an in-place or editable build keeps it.
Without a C compiler or Python's headers, the build stops saying what to install.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, CompileError, ExecError, LinkError, PlatformError

HERE = Path(__file__).resolve().parent
# the native core is a small C package (shmwin/backends/shm/core/): every .c under shmwin/ is one
# of its sources, and its headers (core.h; layout.h, generated from shmwin/backends/shm/format.py by
# format_c.py and committed) are beside them
CORE_SOURCES = sorted(p.relative_to(HERE).as_posix() for p in (HERE / "shmwin").rglob("*.c"))
CORE_HEADERS = sorted(p.relative_to(HERE).as_posix() for p in (HERE / "shmwin").rglob("*.h"))
CFLAGS = ["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
          "-Wno-missing-field-initializers", "-Wno-cast-function-type"]  # fmt: skip

NO_TOOLCHAIN = """\
shmwin: cannot build its native module (shmwin._core) from source: {reason}.
A source build needs a C compiler and Python's headers. Install both, then retry:
  Debian/Ubuntu:  apt-get install gcc python3-dev
  Alpine:         apk add gcc musl-dev python3-dev
  Fedora/RHEL:    dnf install gcc python3-devel
(python:3.x images already have the headers: add gcc, and musl-dev on Alpine.)
Or install a prebuilt wheel, which needs no compiler (manylinux: glibc 2.17 or newer,
CPython 3.10-3.13): pip install --only-binary shmwin shmwin"""

NOT_LINUX = """\
shmwin: cannot be built on {platform}: it needs Linux. Its windows live in /dev/shm and are
guarded by robust process-shared mutexes (pthread_mutex_consistent), which a process that dies
holding one hands to the next; {platform} has neither, so no build of shmwin can run there.
Across hosts, shmwin's Redis backend (backend="redis://...", docs/redis.md) serves the same API
from Linux clients; from {platform}, run shmwin in a Linux container or VM (Docker Desktop's
default), or use limits' own redis:// storage, which needs no native module."""


def check_platform() -> None:
    """Stop at once, before any compiler runs, on a platform shmwin cannot work on."""
    platform = sys.platform
    if not platform.startswith("linux"):
        named = {"darwin": "macOS", "win32": "Windows", "cygwin": "Windows (Cygwin)"}.get(platform, platform)
        raise PlatformError(NOT_LINUX.format(platform=named))


def compile_on_every_core(compiler: Any) -> None:
    """Have ``compiler`` compile an extension's sources at once, a thread each running the
    compiler, as many as the cores: distutils compiles them one after another, and the core's 27
    files made most of a build's wall time (an editable install, each CPython's test build, each
    wheel). The same commands, the same objects; left as it is if the compiler lacks the
    distutils steps this uses."""
    if not all(hasattr(compiler, step) for step in ("_setup_compile", "_get_cc_args", "_compile")):
        return

    def compile_all(sources, output_dir=None, macros=None, include_dirs=None, debug=False,  # type: ignore[no-untyped-def]
                    extra_preargs=None, extra_postargs=None, depends=None):  # fmt: skip
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs
        )
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj: str) -> None:
            source, ext = build[obj]
            compiler._compile(obj, source, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
            list(pool.map(one, [obj for obj in objects if obj in build]))
        return objects

    compiler.compile = compile_all


class BuildExt(build_ext):
    """build_ext that says what to install when the toolchain is missing, and strips wheels."""

    def run(self) -> None:
        if self.extensions:
            check_platform()  # before the toolchain: no compiler advice where none would help
            self._check_toolchain()
        super().run()

    def build_extension(self, ext: Extension) -> None:
        if "bdist_wheel" in self.distribution.commands:  # what ships carries no debug info
            ext.extra_link_args = [*ext.extra_link_args, "-s"]
        compile_on_every_core(self.compiler)
        try:
            super().build_extension(ext)
        except (CCompilerError, CompileError, LinkError, ExecError, OSError) as exc:
            reason = "the C compiler failed (its own output, if any, is above)"
            raise PlatformError(NO_TOOLCHAIN.format(reason=reason)) from exc

    def _check_toolchain(self) -> None:
        include = sysconfig.get_paths()["include"]
        if not os.path.exists(os.path.join(include, "Python.h")):
            reason = f"Python's headers are missing (no {include}/Python.h)"
            raise PlatformError(NO_TOOLCHAIN.format(reason=reason))
        cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
        exe = shlex.split(cc)[0] if cc.strip() else ""
        if not exe or shutil.which(exe) is None:
            reason = f"no C compiler was found ({exe or cc!r} is not on PATH)"
            raise PlatformError(NO_TOOLCHAIN.format(reason=reason))


setup(
    ext_modules=[
        Extension("shmwin._core", sources=CORE_SOURCES, depends=CORE_HEADERS, extra_compile_args=CFLAGS),
    ],
    cmdclass={"build_ext": BuildExt},
)

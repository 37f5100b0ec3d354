"""Build the one native module, shmwin._core (the critical sections); the rest is pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup

# the native core is a small C package: every .c under shmwin/ is one of its sources, and its
# headers (core.h; layout.h, generated from shmwin/layout_words.py and committed) are beside them
CORE_SOURCES = sorted(str(p) for p in Path("shmwin").rglob("*.c"))
CORE_HEADERS = sorted(str(p) for p in Path("shmwin").rglob("*.h"))

setup(
    ext_modules=[
        Extension(
            "shmwin._core",
            sources=CORE_SOURCES,
            depends=CORE_HEADERS,
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
        )
    ],
)

"""Build the one native module, shmwin._core (the critical sections); the rest is pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "shmwin._core",
            sources=["shmwin/_core.c"],
            extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers", "-Wno-cast-function-type"],
        )
    ],
)

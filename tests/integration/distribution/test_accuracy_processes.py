"""Distribution accuracy against numpy's exact quantiles, from values recorded by several real
processes: forked children, spawned ones, and unrelated ``python -c`` processes attaching by
name. The relative error bound must hold for every q in 0.001 .. 0.999, and count, sum, min
and max must be exact."""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest
from support.helpers import run_python

from shmwin import Distribution

pytestmark = pytest.mark.integration

RESOLUTIONS = ("1m/1s", "1h/1m", "24h/1h")
QS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999)


def data_set(kind: str, n: int = 40_000) -> np.ndarray:
    """Values in the default range (1e-6 .. 1e5), of four shapes."""
    rng = np.random.default_rng(sum(kind.encode()))  # fixed per shape (str hashes are salted)
    if kind == "lognormal":
        x = rng.lognormal(-4, 1.5, n)
    elif kind == "uniform":
        x = rng.uniform(0.001, 2.0, n)
    elif kind == "bimodal":
        x = np.concatenate([rng.normal(0.005, 0.0005, n // 2), rng.normal(0.8, 0.05, n - n // 2)])
    else:  # heavy-tailed: Pareto with a tail index of 1.1 (the mean barely exists)
        x = 0.001 * (1 + rng.pareto(1.1, n))
    return np.clip(x, 1e-6, 1e5)


def record_part(name: str, values: np.ndarray) -> None:
    d = Distribution(name, RESOLUTIONS)
    for v in values.tolist():
        d.record(v)
    d.close()


def assert_within_bound(d: Distribution, x: np.ndarray, last: str | None = None) -> None:
    exact = np.quantile(x, QS, method="lower")
    got = np.array(d.quantiles(QS, last=last))
    error = np.abs(got - exact) / exact
    bound = d.relative_error * (1 + 1e-9)
    worst = int(np.argmax(error))
    assert error.max() <= bound, f"q={QS[worst]}: {got[worst]} vs exact {exact[worst]} ({error[worst]:.4%})"
    assert d.count(last=last) == len(x)
    assert d.min(last=last) == x.min() and d.max(last=last) == x.max()
    assert d.sum(last=last) == pytest.approx(float(np.sum(x)), rel=1e-12)


@pytest.mark.parametrize("kind", ["lognormal", "uniform", "bimodal", "heavy-tailed"])
def test_four_shapes_from_forked_and_spawned_processes(make_name, kind):
    name = make_name(kind)
    x = data_set(kind)
    parts = np.array_split(x, 4)
    owner = Distribution(name, RESOLUTIONS)
    try:
        procs = [mp.get_context("fork").Process(target=record_part, args=(name, parts[i])) for i in (0, 1)]
        procs += [mp.get_context("spawn").Process(target=record_part, args=(name, parts[2]))]
        for p in procs:
            p.start()
        record_part(name, parts[3])
        for p in procs:
            p.join(120)
            assert p.exitcode == 0
        for last in (None, "1m", "1h"):
            assert_within_bound(owner, x, last)
    finally:
        owner.unlink()


def test_a_python_c_process_attaches_by_name_and_reads_what_others_wrote(make_name):
    name = make_name("cli")
    x = data_set("lognormal", 5_000)
    d = Distribution(name, RESOLUTIONS)
    try:
        run_python(
            """
            import sys, numpy as np
            from shmwin import Distribution
            d = Distribution.attach(sys.argv[1])
            d.record_many(np.linspace(1.0, 2.0, 1000))
            print(d.count(), d.quantile(0.5))
            """,
            name,
        )
        d.record_many(x)
        both = np.concatenate([x, np.linspace(1.0, 2.0, 1000)])
        assert_within_bound(d, both)
        out = run_python(
            "import sys; from shmwin import Distribution; d = Distribution.attach(sys.argv[1]); "
            "print(d.count(), d.min(), d.max())",
            name,
        )
        assert out.stdout.split() == [str(len(both)), repr(float(both.min())), repr(float(both.max()))]
    finally:
        d.unlink()


@pytest.mark.parametrize("error", [0.002, 0.05])
def test_the_bound_follows_the_relative_error_asked_for(make_name, error):
    d = Distribution(make_name(f"e{error}"), ("1m/1s",), relative_error=error)
    try:
        x = data_set("heavy-tailed", 20_000)
        d.record_many(x)
        assert_within_bound(d, x)
    finally:
        d.unlink()

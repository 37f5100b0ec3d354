"""Run every benchmark, print one results section, and write it into benchmarks/README.md.

    scripts/bench [--quick] [--no-write] [--section NAME] [--title TEXT] [--rev REV]

Runs bench_window.py, bench_limiter.py, bench_breaker.py, bench_token_bucket.py,
bench_twotier.py, bench_foreign_get.py and bench_warm_keys.py (their own output goes to
stderr as they run; ``--quick`` runs bench_breaker without its gunicorn load test), then
prints a markdown section: the targets table of issues "native core", "breaker" and #30
(every ratio against the floor or a peer measured in the same run), then each benchmark's
other tables.
That section replaces the block of the same NAME in benchmarks/README.md, between
``<!-- bench-results:NAME -->`` and ``<!-- /bench-results:NAME -->``; a new NAME is added
above the ``<!-- bench-results:insert-above -->`` line. Nothing else in the README changes,
so the prose stays and earlier sections (e.g. "before-native-core") are kept.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import Target, targets_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
README = HERE / "README.md"
BENCHES = ["bench_window.py", "bench_limiter.py", "bench_breaker.py", "bench_token_bucket.py",
           "bench_twotier.py", "bench_foreign_get.py", "bench_warm_keys.py"]  # fmt: skip
QUICK_ARGS = {"bench_breaker.py": ["--quick", "--no-load"]}  # the load test alone takes ~40 s
# a --rev without it has nothing to measure
NEEDS = {"bench_breaker.py": "shmwin/breaker.py", "bench_token_bucket.py": "shmwin/token_bucket.py",
         "bench_twotier.py": "shmwin/backends/twotier.py"}  # fmt: skip
INSERT_ABOVE = "<!-- bench-results:insert-above -->"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a fast smoke run; never writes the README")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the README alone")
    parser.add_argument("--section", default="latest", help="README block to (re)write (default: latest)")
    parser.add_argument("--title", help="the section's heading, before the date (default: 'Latest run')")
    parser.add_argument("--rev", help="benchmark shmwin as committed at this git revision (pure Python only)")
    args = parser.parse_args()
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", args.section):
        parser.error("--section: lower-case letters, digits, '.' and '-'")
    prog = os.environ.get("SHMWIN_BENCH_CMD", "python benchmarks/report.py")
    command = " ".join([prog, shlex.join(sys.argv[1:])]).strip()

    work = Path(tempfile.mkdtemp(prefix="shmwin-bench-"))
    try:
        env = dict(os.environ)
        if args.rev:
            source = _export(args.rev, work / "src")
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work / "src"), env.get("PYTHONPATH")]))
        else:
            source = _work_tree_source()
        started, busy_before = time.monotonic(), _busy_cpu_s()
        targets: list[Target] = []
        details: list[str] = []
        for bench in BENCHES:
            if args.rev and bench in NEEDS and not (work / "src" / NEEDS[bench]).exists():
                print(f"skipping {bench}: {args.rev} has no {NEEDS[bench]}", file=sys.stderr, flush=True)
                continue
            out = work / f"{bench}.json"
            quick = QUICK_ARGS.get(bench, ["--quick"]) if args.quick else []
            cmd = [sys.executable, str(HERE / bench), "--json", str(out), *quick]
            print(f"running {bench} ...", file=sys.stderr, flush=True)
            subprocess.run(cmd, env=env, cwd=ROOT, stdout=sys.stderr, check=True)
            result = json.loads(out.read_text(encoding="utf-8"))
            targets += [Target(**t) for t in result["targets"]]
            details.append(result["details"])
        took = time.monotonic() - started
        others = _others_cores(busy_before, took)
        section = _section(args, command, source, _machine(env), took, others, targets, details)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(section)
    if args.quick or args.no_write:
        print("\n(README left unchanged)", file=sys.stderr)
        return
    README.write_text(replace_section(README.read_text(encoding="utf-8"), args.section, section), "utf-8")
    print(f"\nwrote section {args.section!r} of {README.relative_to(ROOT)}", file=sys.stderr)


def _section(args, command, source, machine, took, others, targets, details) -> str:  # type: ignore[no-untyped-def]
    title = args.title or "Latest run"
    today = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    passed = sum(t.ok for t in targets)
    quick = " **Quick smoke run: rough figures.**" if args.quick else ""
    lines = [
        f"### {title}: {today}",
        "",
        f"{machine}. {source}.{quick}",
        f"Produced by `{command}` (took {took:.0f} s).",
        _quiet(others),
        "",
        f'#### Targets (issues "native core", "breaker" and #30): {passed} of {len(targets)} met',
        "",
        targets_table(targets),
        "",
        *(d + "\n" for d in details),
    ]
    return "\n".join(lines).rstrip() + "\n"


def replace_section(text: str, name: str, section: str) -> str:
    """``text`` with block ``name`` replaced by ``section``, or with a new block inserted."""
    begin = f"<!-- bench-results:{name} (written by scripts/bench: edits inside are overwritten) -->"
    end = f"<!-- /bench-results:{name} -->"
    block = f"{begin}\n\n{section}\n{end}"
    pattern = re.compile(
        rf"<!-- bench-results:{re.escape(name)}[ >].*?<!-- /bench-results:{re.escape(name)} -->", re.S
    )
    if pattern.search(text):
        return pattern.sub(lambda _: block, text, count=1)
    if INSERT_ABOVE in text:
        return text.replace(INSERT_ABOVE, f"{block}\n\n{INSERT_ABOVE}", 1)
    return text.rstrip("\n") + f"\n\n{block}\n"


def _busy_cpu_s() -> tuple[float, float] | None:
    """(CPU seconds the whole machine has spent busy, all cores, from /proc/stat;
    CPU seconds of this process and of its waited-for descendants)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    ours = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        ours += usage.ru_utime + usage.ru_stime
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), ours


def _others_cores(before: tuple[float, float] | None, took: float) -> float | None:
    """Cores other processes kept busy on average while the benchmarks ran: the machine's
    busy time less the benchmarks' own (every benchmark process has been waited for)."""
    after = _busy_cpu_s()
    if before is None or after is None or took <= 0:
        return None
    return max(0.0, ((after[0] - before[0]) - (after[1] - before[1])) / took)


def _quiet(others: float | None) -> str:
    if others is None:
        return "How busy other processes kept the machine was not measured."
    text = f"Other processes kept {others:.2f} cores busy on average during the run"
    if others > 0.1:
        return f"{text}: **a disturbed run**; rerun it on a quiet machine."
    return f"{text} (a quiet machine)."


def _export(rev: str, dest: Path) -> str:
    """``git archive REV shmwin`` into ``dest``; refuses a revision that needs compiling."""
    sha = _git("rev-parse", "--short", f"{rev}^{{commit}}")
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", sha, "shmwin"], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    if any(dest.rglob("*.c")) or any(dest.rglob("*.pyx")):
        raise SystemExit(f"--rev {rev}: shmwin at {sha} has native sources; build and bench that checkout")
    return f"shmwin as committed at {sha} (`git archive`, pure Python)"


def _work_tree_source() -> str:
    sha = _git("rev-parse", "--short", "HEAD")
    dirty = _git("status", "--porcelain", "--", "shmwin", "setup.py", "pyproject.toml")
    native = sorted(p.name for p in (ROOT / "shmwin").glob("*.so"))
    built = f", compiled modules: {', '.join(native)}" if native else ", no compiled modules"
    return f"shmwin from the work tree at {sha}{' with uncommitted changes' if dirty else ''}{built}"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _machine(env: dict[str, str]) -> str:
    py = f"{platform.python_implementation()} {platform.python_version()}"
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = f" ({line.split(':', 1)[1].strip()})"
                break
    except OSError:
        pass
    libc = " ".join(platform.libc_ver()).strip()
    redis = shutil.which("redis-server")
    redis_ver = ""
    if redis:
        out = subprocess.run([redis, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"v=(\S+)", out)
        redis_ver = f", redis-server {m.group(1)}" if m else ""
    return f"{py}, {os.cpu_count()} cores{cpu}, {platform.system()} {platform.release()}, {libc}{redis_ver}"


if __name__ == "__main__":
    main()

"""Cap processes at a share of one core with cgroup v1's cpu controller: a benchmark's emulation
of servers that each run on a core of their own, on a machine with fewer cores than servers.

Each capped process gets a cgroup of its own in the ``cpu`` hierarchy (``cpu.cfs_quota_us`` of
every ``cpu.cfs_period_us``: it is throttled once it used its quota of a period) and one in the
``cpuacct`` hierarchy (``cpuacct.usage``: the CPU it really used). Needs root and cgroup v1 at
/sys/fs/cgroup/cpu and /sys/fs/cgroup/cpuacct. ``close()`` moves any process left back to the
root groups and removes every group it made, whatever happened before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
ACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
MIN_QUOTA_US = 1_000  # the kernel's least quota (and period)
MAX_PERIOD_US = 1_000_000  # the kernel's longest period


@dataclass(frozen=True)
class CpuSample:
    """One group's counters at one moment."""

    used_ns: int  # cpuacct.usage
    periods: int  # cpu.stat nr_periods: periods in which it ran
    throttled: int  # cpu.stat nr_throttled: periods in which it hit its quota
    throttled_ns: int  # cpu.stat throttled_time

    def minus(self, before: CpuSample) -> CpuSample:
        return CpuSample(self.used_ns - before.used_ns, self.periods - before.periods,
                         self.throttled - before.throttled,
                         self.throttled_ns - before.throttled_ns)  # fmt: skip


def available() -> str | None:
    """None if caps can be made here, else why not."""
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists() or not (ACCT_ROOT / "cpuacct.usage").exists():
        return "no cgroup v1 cpu and cpuacct controllers at /sys/fs/cgroup/{cpu,cpuacct}"
    if not os.access(CPU_ROOT, os.W_OK):
        return "cannot write /sys/fs/cgroup/cpu (needs root)"
    return None


class CpuCaps:
    """Groups named ``<prefix>-<label>``, each capping the processes put into it."""

    def __init__(self, prefix: str, core_share: float, period_us: int | None = None):
        if not 0.01 <= core_share <= 1:
            raise ValueError(f"a core share is 0.01 to 1 of a core, not {core_share}")
        self.prefix, self.core_share = prefix, core_share
        # by default the shortest period the kernel takes (a quota of 1 ms): a capped process
        # runs in the finest slices, closest to a slower core, not in long runs and stalls (the
        # kernel's default period, 100 ms, lets a process at 10 % run 10 ms and then stall 90)
        if period_us is None:
            period_us = max(MIN_QUOTA_US, -(-MIN_QUOTA_US * 1000 // int(core_share * 1000)))
        if not MIN_QUOTA_US <= period_us <= MAX_PERIOD_US or int(core_share * period_us) < MIN_QUOTA_US:
            raise ValueError(f"a period of {period_us} us: 1,000 to 1,000,000 us, with {core_share} of it "
                             f">= {MIN_QUOTA_US} us of quota")  # fmt: skip
        self.period_us = period_us
        self.quota_us = int(core_share * self.period_us)
        self.groups: dict[str, tuple[Path, Path]] = {}
        self.favoured: set[str] = set()

    def cap(self, label: str, pid: int) -> None:
        """Put process ``pid`` (all its threads) into a capped group of its own."""
        cpu, acct = CPU_ROOT / f"{self.prefix}-{label}", ACCT_ROOT / f"{self.prefix}-{label}"
        self.groups[label] = (cpu, acct)
        cpu.mkdir()
        acct.mkdir()
        (cpu / "cpu.cfs_period_us").write_text(str(self.period_us))
        (cpu / "cpu.cfs_quota_us").write_text(str(self.quota_us))
        (cpu / "cgroup.procs").write_text(str(pid))
        (acct / "cgroup.procs").write_text(str(pid))

    def favour(self, label: str, shares: int) -> Path:
        """A group of ``shares`` (the root's processes weigh 1024 each) with no cap: what the
        caller puts into it gets a core before the machine's other work. Its cgroup.procs."""
        cpu, acct = CPU_ROOT / f"{self.prefix}-{label}", ACCT_ROOT / f"{self.prefix}-{label}"
        self.groups[label] = (cpu, acct)
        cpu.mkdir()
        acct.mkdir()
        (cpu / "cpu.shares").write_text(str(shares))
        self.favoured.add(label)
        return cpu / "cgroup.procs"

    def sample(self) -> dict[str, CpuSample]:
        out = {}
        for label, (cpu, acct) in self.groups.items():
            stat = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
            out[label] = CpuSample(int((acct / "cpuacct.usage").read_text()), int(stat["nr_periods"]),
                                   int(stat["nr_throttled"]), int(stat["throttled_time"]))  # fmt: skip
        return out

    def close(self) -> list[str]:
        """Empty and remove every group made; what could not be removed (should be nothing)."""
        left = []
        for cpu, acct in self.groups.values():
            for group, root in ((cpu, CPU_ROOT), (acct, ACCT_ROOT)):
                if not group.exists():
                    continue
                try:
                    for pid in (group / "cgroup.procs").read_text().split():
                        (root / "cgroup.procs").write_text(pid)  # a process still there goes back
                    group.rmdir()
                except OSError as exc:
                    left.append(f"{group}: {exc}")
        self.groups.clear()
        return left


class ProcessCpu:
    """The CPU that processes used, all their threads, from /proc/PID/stat (utime + stime): the
    uncapped run's view of the servers, in the shape of ``CpuCaps.sample`` (no periods)."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.ns_per_tick = 1_000_000_000 // os.sysconf("SC_CLK_TCK")

    def sample(self) -> dict[str, CpuSample]:
        out = {}
        for label, pid in self.pids.items():
            # the fields after the command's closing parenthesis; utime and stime are 14 and 15
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            out[label] = CpuSample((int(fields[11]) + int(fields[12])) * self.ns_per_tick, 0, 0, 0)
        return out

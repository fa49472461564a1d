"""A pytest plugin: the slowest tests of a run and the machine's idle CPU share, written to a file.

``pytest -p durations --durations-file build/test-durations.txt`` (the Makefile's
``make test`` and ``make check``) writes the 25 slowest test phases, the run's
wall time and the share of the machine's CPU time that was idle while it ran
(from ``/proc/stat``), so a slow suite says where its time went. It reports; it
never fails a test on time.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

SLOWEST = 25


def pytest_addoption(parser):
    parser.addoption("--durations-file", default=None,
                     help="write the slowest tests, wall time and idle CPU share to this file")


def _cpu_ticks() -> tuple[int, int] | None:
    """(idle + iowait, total) jiffies of all CPUs since boot, or None off Linux."""
    try:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    except OSError:
        return None
    ticks = [int(x) for x in fields[:8]]   # user nice system idle iowait irq softirq steal
    return ticks[3] + ticks[4], sum(ticks)


class _Durations:
    def __init__(self, path: Path):
        self.path = path
        self.phases: list[tuple[float, str, str]] = []
        self.t0 = time.monotonic()
        self.cpu0 = _cpu_ticks()

    def pytest_runtest_logreport(self, report):
        self.phases.append((report.duration, report.when, report.nodeid))

    def pytest_sessionfinish(self, session, exitstatus):
        wall = time.monotonic() - self.t0
        cpu1 = _cpu_ticks()
        lines = [f"wall {wall:.0f} s, {session.testscollected} tests collected, exit status {int(exitstatus)}"]
        if self.cpu0 and cpu1 and cpu1[1] > self.cpu0[1]:
            idle, total = cpu1[0] - self.cpu0[0], cpu1[1] - self.cpu0[1]
            hz = os.sysconf("SC_CLK_TCK")
            lines.append(f"CPU idle {100 * idle / total:.0f}% of {total / hz:.0f} CPU-seconds "
                         f"({os.cpu_count()} CPUs, /proc/stat)")
        lines.append(f"slowest {SLOWEST} test phases:")
        for d, when, nodeid in sorted(self.phases, reverse=True)[:SLOWEST]:
            lines.append(f"{d:8.2f}s {when:8s} {nodeid}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("\n".join(lines) + "\n")


def pytest_configure(config):
    path = config.getoption("--durations-file")
    if path:
        config.pluginmanager.register(_Durations(Path(path)), "lmdbio-durations")

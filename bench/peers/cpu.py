"""CPU time spent by a system's process trees and by the services it shares (PostgreSQL,
Redis), read from /proc; Linux only. The peers run one at a time, so what the services
spend while one runs is that one's."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from .memory import tree

_TICK = os.sysconf("SC_CLK_TCK")
SERVICES = ("postgres", "redis-server")


def cpu_seconds(pids: Iterable[int]) -> float:
    """User and system time of the processes and of their children they waited for
    (a sandbox that ended is counted in its worker)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        total += sum(int(field) for field in fields[11:15])  # utime stime cutime cstime
    return total / _TICK


def service_pids(names: Iterable[str] = SERVICES) -> set[int]:
    """The processes of the services ``names`` (by their command name)."""
    wanted = set(names)
    found: set[int] = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() in wanted:
                    found.add(int(entry.name))
            except OSError:
                continue
    return found


class CpuMeter:
    """CPU seconds of the roots' trees and the services between start and ``seconds``."""

    def __init__(self, roots: Iterable[int]) -> None:
        self._roots = list(roots)
        self._start = self._now()

    def _now(self) -> float:
        return cpu_seconds(tree(self._roots) | service_pids())

    def seconds(self) -> float:
        return self._now() - self._start

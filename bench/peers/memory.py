"""Memory of a set of process trees as the kernel accounts it: PSS (each shared page
split among the processes that map it), so a hundred forks of one interpreter are
not counted a hundred times. Read from /proc; Linux only."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree(roots: Iterable[int]) -> set[int]:
    """The roots and every process below them (sandboxes in their own session too)."""
    children = _children()
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def pss_bytes(pids: Iterable[int]) -> int:
    total = 0
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:  # ended meanwhile, or not ours to read
            continue
        for line in rollup.splitlines():
            if line.startswith("Pss:"):
                total += int(line.split()[1]) * 1024
                break
    return total


class PeakPss:
    """Samples the trees' PSS every ``interval`` seconds until closed; ``peak`` in bytes."""

    def __init__(self, roots: Iterable[int], interval: float = 0.5) -> None:
        self._roots = list(roots)
        self._interval = interval
        self._stop = threading.Event()
        self.peak = 0
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, pss_bytes(tree(self._roots)))
            if self._stop.wait(self._interval):
                return

    def close(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def megabytes(count: int) -> str:
    return f"{count / 2**20:.0f} MB"

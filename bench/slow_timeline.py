"""Where a slow job's time goes in Revise's stack (issue 26): N jobs of K sequential
image calls against a provider that answers after L seconds (the workload of
``bench/peers.py --slow``, the Procfile stack as shipped), then

* from the run store's timestamps: when the jobs were admitted, when their revisions
  started and their first calls were claimed (relative to the first admission), and
  for each call the median and the slowest of claim -> take (``sent_at``) -> answer
  -> the next call's claim;
* from /proc, every 0.25 s: the cores in use, and each process's share, from the first
  admission until the last first call was claimed (the jobs' start).

    python bench/slow_timeline.py [--jobs 100] [--calls 4] [--latency 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sqlalchemy  # noqa: E402
from peers.cpu import cpu_seconds  # noqa: E402
from peers.slow import SlowProvider  # noqa: E402
from peers.slow_jobs import revise  # noqa: E402

_EVERY = 0.25
_HZ = os.sysconf("SC_CLK_TCK")  # /proc/stat's clock ticks a second
# A process's role, by the first of these its command line holds.
ROLES = (("sandbox -n", "sandbox worker"), ("capabilities -n", "broker worker"),
         ("dispatch -n", "dispatcher"), ("reconcile -B", "reconciler"), ("flower", "Flower"),
         ("runtime.py", "sandboxes"), ("spawner.py", "sandboxes"), ("bwrap", "sandboxes"),
         ("postgres", "PostgreSQL"), ("redis-server", "Redis"), ("honcho", "honcho"))


def _role(command: str) -> str:
    return next((role for mark, role in ROLES if mark in command), "other")


def _seconds() -> tuple[float, dict[str, float]]:
    """Busy CPU seconds of the machine, and CPU seconds by role of every process alive (a
    process that ended is counted in its parent, once the parent waited for it)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = (sum(fields) - fields[3] - fields[4]) / _HZ  # less idle and iowait
    pids: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            pids.setdefault(_role(command), []).append(int(entry.name))
    return busy, {role: cpu_seconds(members) for role, members in pids.items()}


class Sampler:
    def __init__(self) -> None:
        self.samples: list[tuple[float, float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), *_seconds()))
            self._stop.wait(_EVERY)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def cores(self, start: float, end: float) -> tuple[float, dict[str, float]]:
        """Cores in use from the last sample before ``start`` to the first after ``end``
        (epoch seconds), in all and by role."""
        before = [s for s in self.samples if s[0] <= start] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= end] or self.samples[-1:]
        (t0, busy0, roles0), (t1, busy1, roles1) = before[-1], after[0]
        if t1 <= t0:
            return 0.0, {}
        span = t1 - t0
        return (busy1 - busy0) / span, {
            role: (roles1.get(role, 0.0) - roles0.get(role, 0.0)) / span for role in roles1}


def _spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.3f} s, slowest {max(values):.3f} s"


def report(database_url: str, calls: int, sampler: Sampler) -> None:
    engine = sqlalchemy.create_engine(database_url)
    try:
        with engine.connect() as conn:
            def rows(query: str) -> list[sqlalchemy.Row]:
                return list(conn.execute(sqlalchemy.text(query)))

            jobs = rows("SELECT j.run_id, extract(epoch FROM j.created_at) AS admitted, "
                        "extract(epoch FROM min(e.created_at)) AS started FROM jobs j "
                        "JOIN events e ON e.run_id = j.run_id AND e.kind = 'sandbox_start' "
                        "GROUP BY j.run_id, j.created_at")
            attempts = rows("SELECT run_id, occurrence, extract(epoch FROM created_at) AS "
                            "claimed, extract(epoch FROM sent_at) AS sent, "
                            "extract(epoch FROM answered_at) AS answered FROM attempts "
                            "WHERE status = 'succeeded'")
    finally:
        engine.dispose()
    first = min(j.admitted for j in jobs)
    call = {(a.run_id, a.occurrence): a for a in attempts}
    first_claims = [call[(j.run_id, 0)].claimed for j in jobs]
    print(f"{len(jobs)} jobs, times after the first admission:")
    print(f"  admitted: last {max(j.admitted for j in jobs) - first:.2f} s")
    print(f"  admitted -> revision started: {_spread([j.started - j.admitted for j in jobs])}")
    print(f"  revision started -> first claim: "
          f"{_spread([call[(j.run_id, 0)].claimed - j.started for j in jobs])}")
    print(f"  first claim: last {max(first_claims) - first:.2f} s")
    for n in range(calls):
        here = [a for a in attempts if a.occurrence == n]
        line = (f"  call {n}: claim -> take {_spread([a.sent - a.claimed for a in here])}; "
                f"take -> answer {_spread([a.answered - a.sent for a in here])}")
        following = [call[(a.run_id, n + 1)].claimed - a.answered for a in here
                     if (a.run_id, n + 1) in call]
        if following:
            line += f"; answer -> next claim {_spread(following)}"
        print(line)
    busy, by_role = sampler.cores(first, max(first_claims))
    shares = ", ".join(f"{role} {cores:.2f}" for role, cores in
                       sorted(by_role.items(), key=lambda kv: -kv[1]) if cores >= 0.01)
    print(f"while the jobs started ({max(first_claims) - first:.1f} s): {busy:.2f} cores in "
          f"use; {shares}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--latency", type=float, default=2.0)
    opts = parser.parse_args()
    provider = SlowProvider(opts.latency)
    sampler = Sampler()
    try:
        with tempfile.TemporaryDirectory(prefix="revise-slow-timeline-") as tmp:
            got = revise(opts.jobs, opts.calls, f"{provider.url}/v1", Path(tmp),
                         after=lambda url: report(url, opts.calls, sampler))
        charged = provider.stats()
    finally:
        sampler.close()
        provider.close()
    ideal = opts.calls * opts.latency
    print(f"makespan {got['makespan']:.2f} s ({got['makespan'] / ideal:.2f}x ideal); the "
          f"provider: {charged}")


if __name__ == "__main__":
    main()

"""CPU per job and per call, by process: Revise's Celery stack beside the floor with
writes (issue 27 item 7: where the gap in ``bench/peers.py``'s CPU row goes).

Each system (the stacks of ``peers/revise.py`` and ``peers/floor.py``, one broker worker
consuming) runs ``--jobs`` concurrent jobs of no call, then of ``--calls`` sequential
no-op calls, ``--rounds`` times each, while each role's process tree (its sandboxes
included), PostgreSQL and Redis are read from /proc. Per job: the median no-call round
over the jobs; per call: the median round with calls, less that, over the calls. The
systems run one after the other, so read them side by side within one run. Linux only.

    python bench/cpu_split.py [--jobs 20] [--calls 8] [--rounds 3]
                              [--database-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers.cpu import cpu_seconds, service_pids  # noqa: E402
from peers.floor import CeleryFloor  # noqa: E402
from peers.memory import tree  # noqa: E402
from peers.revise import ReviseCelery, redis_url  # noqa: E402
from peers.scratch import PG_ADMIN, scratch_database  # noqa: E402

# Both stacks start their workers in this order (the second broker worker is switched off).
WORKERS = ("dispatcher", "sandbox worker and its sandboxes", "broker worker", "broker worker")
SERVICES = {"PostgreSQL": "postgres", "Redis": "redis-server"}


def _reader(pids: list[int]) -> Callable[[], dict[str, float]]:
    def read() -> dict[str, float]:
        seconds: dict[str, float] = {}
        for role, pid in zip(WORKERS, pids, strict=True):
            seconds[role] = seconds.get(role, 0.0) + cpu_seconds(tree([pid]))
        for label, name in SERVICES.items():
            seconds[label] = cpu_seconds(service_pids([name]))
        return seconds
    return read


def _rounds(system: ReviseCelery | CeleryFloor, jobs: int, calls: int, rounds: int
            ) -> dict[str, float]:
    """CPU ms per job of each role, the median of ``rounds`` rounds of ``jobs`` jobs."""
    read = _reader(system.pids())
    samples: dict[str, list[float]] = {}
    for _ in range(rounds):
        before = read()
        system.concurrent(jobs, calls)
        after = read()
        for role in after:
            samples.setdefault(role, []).append((after[role] - before[role]) * 1000 / jobs)
    return {role: statistics.median(values) for role, values in samples.items()}


def split(system: ReviseCelery | CeleryFloor, jobs: int, calls: int, rounds: int
          ) -> tuple[dict[str, float], dict[str, float]]:
    """(CPU ms per job, CPU ms per call) by role."""
    system.broker_workers(1)
    system.concurrent(2, 2)  # every code path warm
    per_job = _rounds(system, jobs, 0, rounds)
    with_calls = _rounds(system, jobs, calls, rounds)
    return per_job, {role: (with_calls[role] - per_job[role]) / calls for role in per_job}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=None,
                        help="PostgreSQL database to use (default: a scratch one)")
    parser.add_argument("--redis-url", default=redis_url())
    opts = parser.parse_args()
    results = {}
    with contextlib.ExitStack() as stack:
        home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="revise-cpu-")))
        url = opts.database_url or stack.enter_context(scratch_database(PG_ADMIN))
        for name, make in (
                ("Revise", lambda here: ReviseCelery(here, url, opts.redis_url)),
                ("floor + writes", lambda here: CeleryFloor(here, opts.redis_url, url))):
            here = home / name.split()[0]
            here.mkdir()
            system = make(here)
            try:
                results[name] = split(system, opts.jobs, opts.calls, opts.rounds)
            finally:
                system.close()
    names = list(results)
    print(f"{opts.jobs} concurrent jobs, of no call and of {opts.calls} no-op calls; CPU ms, "
          f"median of {opts.rounds} rounds\n")
    print("| process | " + " | ".join(f"per job, {n}" for n in names) + " | "
          + " | ".join(f"per call, {n}" for n in names) + " |")
    print("|---" * (1 + 2 * len(names)) + "|")
    roles = list(dict.fromkeys(role for per_job, _ in results.values() for role in per_job))
    for role in [*roles, "all"]:
        def cell(part: dict[str, float], role: str = role) -> str:
            return f"{sum(part.values()) if role == 'all' else part[role]:.2f}"
        print(f"| {role} | " + " | ".join(cell(results[n][0]) for n in names) + " | "
              + " | ".join(cell(results[n][1]) for n in names) + " |")


if __name__ == "__main__":
    main()

"""Revise beside Temporal and DBOS on the same machine, interleaved in one run (issue 13).

Run from the repository root (Redis and PostgreSQL up; the peers need the extra,
``pip install -e '.[peers]'``):

    python bench/peers.py [--quick] [--repeats 3] [--peers revise,temporal,dbos]

Workloads (median of the repeats; each repeat runs every peer in turn, so load on
a shared machine falls on all of them alike):

* 50 sequential no-op calls in one workflow, per call;
* a 32-way fanout of no-op calls, per call;
* replay of a recorded 50-call workflow, per call (Revise embedded and through Celery);
* 20 concurrent jobs x 8 sequential calls, calls/s (Revise through the Celery stack
  with one and with two broker worker processes; beside it the same hops with no-op
  tasks, ``peers/floor.py``, bare and with the contract's two PostgreSQL writes per
  call: what this design costs on this machine before any more of Revise's work, so
  a target above the floor is out of reach here), and the CPU per call of the same jobs
  with one broker worker (every process of the system, its sandboxes, PostgreSQL and
  Redis; ``peers/cpu.py``) for Revise and both floors;
* the fanout repair at N = 4, 8, 16, 32: branch 1 fails, the repaired code recovers
  the run with each system's own mechanism; provider dispatch attempts over the
  failed run and the recovery (Revise: call-level replay; Temporal: reset to the
  workflow task before the fanout; DBOS: fork at the failed step);
* Revise's tools: the checker's p50 over ``ast.parse``'s on the same scripts, and
  ``revise --help`` (``peers/tools.py``);
* with ``--slow [N ...]``, instead: N jobs of 4 sequential calls to a provider that
  answers every request after 2 s, each system as shipped in its own process
  (``peers/slow.py``): makespan / ideal, peak provider concurrency, charges, peak PSS.

Temporal runs its CLI's dev server on free ports on 127.0.0.1 (started and stopped
here); DBOS uses a SQLite system database. A benchmark, not a test: the targets of
issue 13 are printed as met or not met, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers.cpu import CpuMeter  # noqa: E402
from peers.floor import CeleryFloor  # noqa: E402
from peers.revise import ReviseCelery, ReviseEmbedded, redis_url  # noqa: E402
from peers.scratch import PG_ADMIN, scratch_database  # noqa: E402
from peers.tools import checker_ratio, help_ms  # noqa: E402

EXTRA = "pip install -e '.[peers]'"


@dataclass(frozen=True)
class Sizes:
    sequential: int = 50
    fanout: int = 32
    replay: int = 50
    jobs: int = 20
    job_calls: int = 8
    widths: tuple[int, ...] = (4, 8, 16, 32)
    repeats: int = 3


QUICK = Sizes(sequential=10, fanout=8, replay=10, jobs=4, job_calls=4, widths=(4,), repeats=1)

SEQ, FAN, REPLAY, JOBS, CPU = "sequential", "fanout", "replay", "concurrent", "cpu"
ROWS = {SEQ: "{n} sequential no-op calls, ms per call",
        FAN: "{n}-way fanout, ms per call",
        REPLAY: "replay of {n} recorded calls, ms per call",
        JOBS: "{jobs} concurrent jobs x {calls} calls, calls/s",
        CPU: "{jobs} concurrent jobs x {calls} calls, CPU ms per call"}
TEMPORAL, DBOS = "Temporal (dev server)", "DBOS (SQLite)"
EMBEDDED, CELERY = "Revise embedded", "Revise Celery"
CELERY_1, CELERY_2 = "Revise Celery, 1 broker worker", "Revise Celery, 2 broker workers"
FLOOR, WRITES = "Celery floor", "Celery floor + writes"
FLOOR_1, FLOOR_2 = "Celery floor, 1 broker worker", "Celery floor, 2 broker workers"
WRITES_1, WRITES_2 = ("Celery floor + writes, 1 broker worker",
                      "Celery floor + writes, 2 broker workers")
SCALED = {CELERY: (CELERY_1, CELERY_2), FLOOR: (FLOOR_1, FLOOR_2), WRITES: (WRITES_1, WRITES_2)}


# ---- the systems ----------------------------------------------------------------------------


def _open_peers(stack: contextlib.ExitStack, home: Path, wanted: set[str],
                opts: argparse.Namespace) -> dict[str, Any]:
    systems: dict[str, Any] = {}
    if "temporal" in wanted:
        try:
            from peers.temporal import TemporalPeer
        except ImportError as exc:
            print(f"Temporal skipped ({exc.name} is missing: {EXTRA})")
        else:
            (home / "temporal").mkdir()
            systems[TEMPORAL] = stack.enter_context(contextlib.closing(
                TemporalPeer(home / "temporal")))
    if "dbos" in wanted:
        try:
            from peers.dbos import DbosPeer
        except ImportError as exc:
            print(f"DBOS skipped ({exc.name} is missing: {EXTRA})")
        else:
            (home / "dbos").mkdir()
            systems[DBOS] = stack.enter_context(contextlib.closing(DbosPeer(home / "dbos")))
    if "revise" in wanted:
        systems[EMBEDDED] = stack.enter_context(contextlib.closing(ReviseEmbedded(home)))
        if not opts.no_celery:
            url = opts.database_url or stack.enter_context(scratch_database(PG_ADMIN))
            (home / "celery").mkdir()
            systems[CELERY] = stack.enter_context(contextlib.closing(
                ReviseCelery(home / "celery", url, opts.redis_url)))
            (home / "floor").mkdir()
            systems[FLOOR] = stack.enter_context(contextlib.closing(
                CeleryFloor(home / "floor", opts.redis_url)))
            (home / "writes").mkdir()
            systems[WRITES] = stack.enter_context(contextlib.closing(
                CeleryFloor(home / "writes", opts.redis_url, url)))
    return systems


# ---- measuring ------------------------------------------------------------------------------


def _plan(systems: dict[str, Any], sizes: Sizes) -> list[tuple[str, str, Callable[[], float]]]:
    """(row, column, measure) for one repeat, interleaved: every row runs every system."""
    plan: list[tuple[str, str, Callable[[], float]]] = []
    for row, method, n in ((SEQ, "sequential", sizes.sequential), (FAN, "fanout", sizes.fanout),
                           (REPLAY, "replay", sizes.replay)):
        for column, system in systems.items():
            if hasattr(system, method):  # the floors run only the concurrent jobs
                plan.append((row, column, lambda s=system, m=method, k=n:
                             getattr(s, m)(k) * 1000 / k))
    calls = sizes.jobs * sizes.job_calls
    for column, system in systems.items():
        if column in SCALED:
            for workers, label in zip((1, 2), SCALED[column], strict=True):
                plan.append((JOBS, label, lambda s=system, w=workers: _jobs(s, w, sizes)))
            plan.append((CPU, SCALED[column][0], lambda s=system: _cpu_per_call(s, sizes)))
        elif hasattr(system, "concurrent"):
            plan.append((JOBS, column, lambda s=system: calls / s.concurrent(
                sizes.jobs, sizes.job_calls)))
    return plan


def _jobs(celery: ReviseCelery | CeleryFloor, workers: int, sizes: Sizes) -> float:
    celery.broker_workers(workers)
    try:
        return sizes.jobs * sizes.job_calls / celery.concurrent(sizes.jobs, sizes.job_calls)
    finally:
        celery.broker_workers(2)


def _cpu_per_call(celery: ReviseCelery | CeleryFloor, sizes: Sizes) -> float:
    """CPU milliseconds per call of the concurrent jobs with one broker worker: every
    process of the system (sandboxes included), PostgreSQL and Redis."""
    celery.broker_workers(1)
    try:
        meter = CpuMeter(celery.pids())
        celery.concurrent(sizes.jobs, sizes.job_calls)
        return meter.seconds() * 1000 / (sizes.jobs * sizes.job_calls)
    finally:
        celery.broker_workers(2)


def measure(systems: dict[str, Any], sizes: Sizes) -> dict[str, dict[str, float]]:
    warm = Sizes(sequential=2, fanout=2, replay=2, jobs=2, job_calls=2, repeats=1)
    for _, _, run in _plan(systems, warm):  # warm every worker and code path once
        run()
    samples: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for repeat in range(sizes.repeats):
        for row, column, run in _plan(systems, sizes):
            samples[row][column].append(run())
        print(f"  repeat {repeat + 1}/{sizes.repeats} done", file=sys.stderr)
    return {row: {col: statistics.median(v) for col, v in cols.items()}
            for row, cols in samples.items()}


def repairs(systems: dict[str, Any], sizes: Sizes) -> dict[int, dict[str, int]]:
    paid: dict[int, dict[str, int]] = {}
    for n in sizes.widths:
        paid[n] = {column: system.repair(n) for column, system in systems.items()
                   if column not in SCALED}  # the queue pays what embedded pays
    return paid


# ---- printing -------------------------------------------------------------------------------


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}" if value < 100 else f"{value:.0f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def print_tables(figures: dict[str, dict[str, float]], paid: dict[int, dict[str, int]],
                 sizes: Sizes, tools: dict[str, float]) -> None:
    columns = [c for c in (TEMPORAL, DBOS, EMBEDDED, CELERY, CELERY_1, CELERY_2, FLOOR_1,
                           FLOOR_2, WRITES_1, WRITES_2)
               if any(c in cols for cols in figures.values())]
    print("| work | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for row, label in ROWS.items():
        if row in figures:
            title = label.format(n={SEQ: sizes.sequential, FAN: sizes.fanout,
                                    REPLAY: sizes.replay}.get(row, 0),
                                 jobs=sizes.jobs, calls=sizes.job_calls)
            print(f"| {title} | " + " | ".join(_fmt(figures[row].get(c)) for c in columns)
                  + " |")
    print()
    print("Ratios (Revise / peer; per-call rows: lower is better, calls/s: higher is better)")
    for row in (SEQ, FAN, REPLAY, JOBS):  # CPU is Revise's and the floors' only
        cols = figures.get(row, {})
        for mine in (EMBEDDED, CELERY, CELERY_1, CELERY_2, FLOOR_1, FLOOR_2, WRITES_1,
                     WRITES_2):
            if mine in cols:
                temporal = _ratio(cols[mine], cols.get(TEMPORAL))
                dbos = _ratio(cols[mine], cols.get(DBOS))
                print(f"  {row:<10} {mine:<32} vs Temporal {temporal:>8}   vs DBOS {dbos:>8}")
    print()
    _targets(figures, tools)
    if paid:
        print()
        names = list(next(iter(paid.values())))
        print("| fanout repair: paid calls (failed run + recovery) | "
              + " | ".join(names) + " | full rerun |")
        print("|---|" + "---|" * (len(names) + 1))
        for n, row_paid in paid.items():
            print(f"| N = {n} | " + " | ".join(str(row_paid[c]) for c in names)
                  + f" | {2 * n} |")


def _targets(figures: dict[str, dict[str, float]], tools: dict[str, float]) -> None:
    jobs, replay, seq, cpu = (figures.get(r, {}) for r in (JOBS, REPLAY, SEQ, CPU))
    checks = [
        ("queue calls/s >= Temporal's", jobs.get(CELERY_1), jobs.get(TEMPORAL), ">=", 1.0),
        ("queue calls/s >= 0.8x DBOS's", jobs.get(CELERY_1), jobs.get(DBOS), ">=", 0.8),
        ("two broker workers >= 1.5x one", jobs.get(CELERY_2), jobs.get(CELERY_1), ">=", 1.5),
        ("floor: bare hops >= 0.8x DBOS's", jobs.get(FLOOR_1), jobs.get(DBOS), ">=", 0.8),
        ("floor: two broker workers >= 1.5x one", jobs.get(FLOOR_2), jobs.get(FLOOR_1), ">=",
         1.5),
        ("floor + writes >= 0.8x DBOS's", jobs.get(WRITES_1), jobs.get(DBOS), ">=", 0.8),
        ("replay embedded <= DBOS's", replay.get(EMBEDDED), replay.get(DBOS), "<=", 1.0),
        ("replay through Celery <= 2x embedded", replay.get(CELERY), replay.get(EMBEDDED),
         "<=", 2.0),
        ("sequential embedded <= 1.5x DBOS's", seq.get(EMBEDDED), seq.get(DBOS), "<=", 1.5),
        ("checker p50 <= 5x ast.parse", tools.get("checker"), 1.0, "<=", 5.0),
    ]
    print("Issue 13 targets (and issue 27's, CPU per call)")
    for name, mine, theirs, op, factor in checks:
        if mine is None or theirs is None:
            print(f"  {name:<40} not measured")
            continue
        ratio = mine / theirs
        met = ratio >= factor if op == ">=" else ratio <= factor
        print(f"  {name:<40} {ratio:6.2f}x  {'met' if met else 'NOT met'}")
    for floor, label, what in ((FLOOR_1, "Revise / floor", "the bare hops"),
                               (WRITES_1, "Revise / floor + writes", "the hops and writes")):
        if floor in jobs and CELERY_1 in jobs:
            print(f"  {label:<40} {jobs[CELERY_1] / jobs[floor]:6.2f}x  (what Revise's own "
                  f"work leaves of {what}' calls/s)")
    if CELERY_1 in cpu and WRITES_1 in cpu:
        ratio = cpu[CELERY_1] / cpu[WRITES_1]
        print(f"  {'CPU per call <= 1.3x floor + writes':<40} {ratio:6.2f}x  "
              f"{'met' if ratio <= 1.3 else 'NOT met'}")
    if "help_ms" in tools:
        ms = tools["help_ms"]
        print(f"  {'revise --help <= 200 ms':<40} {ms:5.0f} ms {'met' if ms <= 200 else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repeat")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--peers", default="revise,temporal,dbos",
                        help="comma-separated subset of revise,temporal,dbos")
    parser.add_argument("--no-celery", action="store_true",
                        help="Revise embedded only (no Redis/PostgreSQL needed)")
    parser.add_argument("--database-url", default=None,
                        help="an empty PostgreSQL database for the Celery stack (default: "
                        "create one on 127.0.0.1 and drop it afterwards)")
    parser.add_argument("--redis-url", default=redis_url())
    parser.add_argument("--slow", type=int, nargs="*", default=None, metavar="N",
                        help="instead: N jobs of --slow-calls sequential calls to a provider "
                        "that answers after --slow-latency s (issue 26; default N: 20 100 "
                        "300), each system in its own process")
    parser.add_argument("--slow-calls", type=int, default=4)
    parser.add_argument("--slow-latency", type=float, default=2.0)
    opts = parser.parse_args(argv)
    sizes = QUICK if opts.quick else Sizes()
    if opts.repeats is not None:
        sizes = Sizes(**{**sizes.__dict__, "repeats": opts.repeats})
    wanted = {p.strip() for p in opts.peers.split(",") if p.strip()}
    if opts.slow is not None:
        from peers.slow import main as slow_jobs

        slow_jobs(opts.slow or [20, 100, 300], [p for p in ("revise", "temporal", "dbos")
                                                if p in wanted],
                  opts.slow_calls, opts.slow_latency)
        return 0
    logging.getLogger("temporalio").setLevel(logging.CRITICAL)
    with tempfile.TemporaryDirectory(prefix="revise-peers-") as tmp, \
            contextlib.ExitStack() as stack:
        systems = _open_peers(stack, Path(tmp), wanted, opts)
        figures = measure(systems, sizes)
        paid = repairs(systems, sizes)
    tools = {"checker": checker_ratio(samples=sizes.repeats * 10),
             "help_ms": help_ms(samples=sizes.repeats * 3)} if "revise" in wanted else {}
    print_tables(figures, paid, sizes, tools)
    return 0


if __name__ == "__main__":
    sys.exit(main())

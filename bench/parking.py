"""Jobs that wait against a slow provider (issue 26): N jobs of K sequential image calls,
each call answered after L seconds, on the deployment's worker processes (dispatcher,
a sandbox worker of S slots, one broker worker with enough threads), with parking off,
as shipped (park after 5 s while a job waits for a slot, else after 30 s) and after
fixed waits, side by side in one run.

Prints, per N: makespan / ideal (ideal = K x L: every job's calls back to back, all
jobs at once), the most provider calls in flight at once (from the provider log's
intent and outcome lines), the calls paid (every job pays exactly K), the PSS of the
stack's processes and their sandboxes idle and at peak (PostgreSQL and Redis counted
apart), and how fast the client submitted and the dispatcher admitted the jobs.
Ratios, read within one run: the machine's speed drifts. The default is a short run;
the issue's N = 100 and 300 are `--jobs 20 100 300`.

First it measures admission alone (``--admission N``, 300 by default; 0 skips it): the
dispatcher as the Procfile runs it (16 threads) and nothing else, N jobs submitted at
once; how fast the client submitted them and the dispatcher checked, annotated, gated
and recorded them, with no sandbox or broker worker competing for the cores.

    python bench/parking.py [--jobs 20] [--calls 4] [--latency 2] [--slots 200]
                            [--pool threads|prefork] [--park-after 0.5 ...] [--without-off]
                            [--admission 300]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers.memory import PeakPss, megabytes, pss_bytes, tree  # noqa: E402
from peers.revise import redis_url  # noqa: E402
from peers.scratch import PG_ADMIN, scratch_database  # noqa: E402

from broker.envelope import Envelope  # noqa: E402
from broker.providers import ProviderLog  # noqa: E402
from broker.providers.log import peak_in_flight  # noqa: E402
from tests.workers.conftest import Stack  # noqa: E402
from workers.config import WorkerSettings  # noqa: E402

SCRIPT = '''
async def orchestrate(ctx, args):
    out = []
    for i in range(CALLS):
        image = await ctx.run("image.generate", {"prompt": args["job"] + " " + str(i)})
        out.append(image["artifact"]["id"])
    return out
'''


Parking = tuple[float | None, float | None]  # (after, under load after); (None, None): off
_DEFAULTS = WorkerSettings()
SHIPPED: Parking = (_DEFAULTS.park_after_seconds, _DEFAULTS.park_under_load_after_seconds)


def measure(home: Path, database_url: str, *, jobs: int, calls: int, latency: float,
            slots: int, pool: str, parking: Parking) -> dict[str, float]:
    stack = Stack(home, database_url, redis_url(), local_latency=latency)
    for name, value in zip(("PARK_AFTER_SECONDS", "PARK_UNDER_LOAD_AFTER_SECONDS"), parking,
                           strict=True):
        stack.env[f"REVISE_CELERY_{name}"] = "none" if value is None else str(value)
    stack.env.update({"REVISE_SANDBOX": "process", "REVISE_SANDBOX_WARM": "1"})
    try:
        stack.worker("dispatch", concurrency=4)
        stack.worker("sandbox", pool=pool, concurrency=slots)
        stack.worker("capabilities", concurrency=min(max(jobs, 8), 200))
        stack.wait_ready(120)
        time.sleep(2)  # warm sandboxes started
        idle = pss_bytes(tree(proc.pid for proc in stack.procs))
        memory = PeakPss(proc.pid for proc in stack.procs)
        script = SCRIPT.replace("CALLS", str(calls))
        started, started_at = time.perf_counter(), time.time()
        handles = [stack.client.submit(script, {"job": f"job {n}"}, Envelope(),
                                       f"park-{uuid.uuid4().hex[:8]}") for n in range(jobs)]
        submitted = time.perf_counter() - started
        for handle in handles:
            report = handle.wait(3600)
            assert report["status"] == "succeeded", report["error"]
        makespan = time.perf_counter() - started
        peak_pss = memory.close()
        admitted = _recorded(database_url)[1] - started_at
        lines = ProviderLog(stack.settings.provider_log_path).lines()
    finally:
        stack.stop()
    paid = sum(1 for line in lines if line.get("phase") == "answered")
    return {"ratio": makespan / (calls * latency), "peak": peak_in_flight(lines),
            "paid": paid, "expected": jobs * calls, "idle": idle, "peak_pss": peak_pss,
            "submit_rate": jobs / submitted, "admit_rate": jobs / admitted}


def admission(home: Path, database_url: str, *, jobs: int, calls: int) -> dict[str, float]:
    """The dispatcher alone: N jobs submitted at once, until the last is recorded."""
    stack = Stack(home, database_url, redis_url())
    stack.env.update({"REVISE_SANDBOX": "process"})
    try:
        stack.worker("dispatch", concurrency=16)
        stack.wait_ready(120)
        script = SCRIPT.replace("CALLS", str(calls))
        started, started_at = time.perf_counter(), time.time()
        for n in range(jobs):
            stack.client.submit(script, {"job": f"job {n}"}, Envelope(),
                                f"admit-{uuid.uuid4().hex[:8]}")
        submitted = time.perf_counter() - started
        deadline = time.monotonic() + 600
        while (recorded := _recorded(database_url))[0] < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the dispatcher recorded fewer than {jobs} jobs in 600 s")
            time.sleep(0.2)
        admitted = recorded[1] - started_at
    finally:
        stack.stop()
    return {"submit_rate": jobs / submitted, "admit_rate": jobs / admitted}


def _recorded(database_url: str) -> tuple[int, float]:
    """How many jobs the dispatcher recorded, and when the last one was (the store's clock:
    this host's; 0 while there is none)."""
    engine = sqlalchemy.create_engine(database_url)
    try:
        with engine.connect() as connection:
            count, last = connection.execute(
                sqlalchemy.text("SELECT count(*), max(created_at) FROM jobs")).one()
    finally:
        engine.dispose()
    if last is None:
        return 0, 0.0
    if isinstance(last, str):  # SQLite keeps text
        last = datetime.datetime.fromisoformat(last)
    if last.tzinfo is None:
        last = last.replace(tzinfo=datetime.UTC)
    return int(count), last.timestamp()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--slots", type=int, default=200, help="sandbox worker concurrency "
                        "(the Procfile's: 200)")
    parser.add_argument("--pool", choices=("prefork", "threads"), default="threads")
    parser.add_argument("--park-after", type=float, nargs="*", default=[],
                        help="also park after each of these waits, whatever the load")
    parser.add_argument("--without-off", action="store_true",
                        help="skip the run with parking off (its makespan is about "
                        "ceil(N / slots) x K x L)")
    parser.add_argument("--admission", type=int, default=300, metavar="N",
                        help="jobs for the admission-alone measurement (0: skip it)")
    opts = parser.parse_args()
    print(f"{opts.calls} sequential calls of {opts.latency:g} s per job, {opts.slots} sandbox "
          f"slots, process sandbox; {time.strftime('%Y-%m-%d')}")
    if opts.admission > 0:
        with tempfile.TemporaryDirectory(prefix="revise-bench-admit-") as tmp, \
                scratch_database(PG_ADMIN) as database_url:
            got = admission(Path(tmp), database_url, jobs=opts.admission, calls=opts.calls)
        print(f"admission alone, {opts.admission} jobs at once: submitted "
              f"{got['submit_rate']:.0f} / s, admitted {got['admit_rate']:.1f} / s "
              "(issue 26: >= 50 / s)", flush=True)
    print("| N | parking | makespan / ideal | peak calls in flight | paid / expected "
          "| idle PSS | peak PSS | submitted / s | admitted / s |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="revise-bench-park-") as tmp:
        for jobs in opts.jobs:
            off: list[Parking] = [] if opts.without_off else [(None, None)]
            always: list[Parking] = [(after, None) for after in opts.park_after]
            for parking in [*off, SHIPPED, *always]:
                with contextlib.ExitStack() as stack:
                    database_url = stack.enter_context(scratch_database(PG_ADMIN))
                    home = Path(tmp) / uuid.uuid4().hex[:8]
                    home.mkdir()
                    got = measure(home, database_url, jobs=jobs, calls=opts.calls,
                                  latency=opts.latency, slots=opts.slots, pool=opts.pool,
                                  parking=parking)
                label = _label(parking)
                print(f"| {jobs} | {label} | {got['ratio']:.1f}x | {got['peak']} | "
                      f"{got['paid']} / {got['expected']} | {megabytes(got['idle'])} | "
                      f"{megabytes(got['peak_pss'])} | {got['submit_rate']:.0f} | "
                      f"{got['admit_rate']:.1f} |", flush=True)


def _label(parking: Parking) -> str:
    after, under_load = parking
    if parking == SHIPPED:
        return f"as shipped (after {under_load:g} s under load, else {after:g} s)"
    return "off" if after is None else f"after {after:g} s"


if __name__ == "__main__":
    main()

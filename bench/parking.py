"""Jobs that wait against a slow provider (issue 26): N jobs of K sequential image calls,
each call answered after L seconds, on the deployment's worker processes (dispatcher,
S prefork sandbox slots, one broker worker with enough threads), with parking off and
on, side by side in one run.

Prints, per N: makespan / ideal (ideal = K x L: every job's calls back to back, all
jobs at once), the most provider calls in flight at once (from the provider log's
intent and outcome lines), and the calls paid (every job pays exactly K). Ratios, read
within one run: the machine's speed drifts. The default is a short run; the issue's
N = 100 and 300 are `--jobs 20 100 300`; `--park-after 0.5 0.1` compares thresholds.

    python bench/parking.py [--jobs 20] [--calls 4] [--latency 2] [--slots 2]
                            [--park-after 0.5 ...] [--without-off]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers.revise import redis_url  # noqa: E402
from peers.scratch import scratch_database  # noqa: E402

from broker.envelope import Envelope  # noqa: E402
from broker.providers import ProviderLog  # noqa: E402
from broker.providers.log import peak_in_flight  # noqa: E402
from tests.workers.conftest import Stack  # noqa: E402

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

SCRIPT = '''
async def orchestrate(ctx, args):
    out = []
    for i in range(CALLS):
        image = await ctx.run("image.generate", {"prompt": args["job"] + " " + str(i)})
        out.append(image["artifact"]["id"])
    return out
'''


def measure(home: Path, database_url: str, *, jobs: int, calls: int, latency: float,
            slots: int, park_after: float | None) -> dict[str, float]:
    queue = {"local_latency": latency}
    if park_after is not None:
        queue["park_after_seconds"] = park_after
    stack = Stack(home, database_url, redis_url(), **queue)
    if park_after is None:
        stack.env["REVISE_CELERY_PARK_AFTER_SECONDS"] = "none"
    stack.env.update({"REVISE_SANDBOX": "process", "REVISE_SANDBOX_WARM": "1"})
    try:
        stack.worker("dispatch", concurrency=4)
        stack.worker("sandbox", pool="prefork", concurrency=slots)
        stack.worker("capabilities", concurrency=min(max(jobs, 8), 200))
        stack.wait_ready(120)
        script = SCRIPT.replace("CALLS", str(calls))
        started = time.perf_counter()
        handles = [stack.client.submit(script, {"job": f"job {n}"}, Envelope(),
                                       f"park-{uuid.uuid4().hex[:8]}") for n in range(jobs)]
        for handle in handles:
            report = handle.wait(3600)
            assert report["status"] == "succeeded", report["error"]
        makespan = time.perf_counter() - started
        lines = ProviderLog(stack.settings.provider_log_path).lines()
    finally:
        stack.stop()
    paid = sum(1 for line in lines if line.get("phase") == "answered")
    return {"ratio": makespan / (calls * latency), "peak": peak_in_flight(lines),
            "paid": paid, "expected": jobs * calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[20])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--park-after", type=float, nargs="+", default=[0.5],
                        help="park thresholds to compare with parking off")
    parser.add_argument("--without-off", action="store_true",
                        help="skip the run with parking off (its makespan is about "
                        "ceil(N / slots) x K x L)")
    opts = parser.parse_args()
    print(f"{opts.calls} sequential calls of {opts.latency:g} s per job, {opts.slots} sandbox "
          f"slots, process sandbox; {time.strftime('%Y-%m-%d')}")
    print("| N | parking | makespan / ideal | peak calls in flight | paid / expected |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="revise-bench-park-") as tmp:
        for jobs in opts.jobs:
            thresholds = [] if opts.without_off else [None]
            for park_after in [*thresholds, *opts.park_after]:
                with contextlib.ExitStack() as stack:
                    database_url = stack.enter_context(scratch_database(PG_ADMIN))
                    home = Path(tmp) / uuid.uuid4().hex[:8]
                    home.mkdir()
                    got = measure(home, database_url, jobs=jobs, calls=opts.calls,
                                  latency=opts.latency, slots=opts.slots,
                                  park_after=park_after)
                label = "off" if park_after is None else f"after {park_after:g} s"
                print(f"| {jobs} | {label} | {got['ratio']:.1f}x | {got['peak']} | "
                      f"{got['paid']} / {got['expected']} |", flush=True)


if __name__ == "__main__":
    main()

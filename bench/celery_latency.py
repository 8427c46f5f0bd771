"""Per-call latency through Celery vs the embedded path, and broker-worker throughput.

Run from the repository root with Redis and PostgreSQL up:
    python bench/celery_latency.py [--calls 200] [--throughput 400]
Prints a table of figures and ratios (a benchmark, not a test). It creates and
drops its own PostgreSQL database and uses Redis db 13 with its own queue prefix.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy import create_engine, text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.calls import CallReport, CallRequest, Outcome  # noqa: E402
from broker.catalog import CATALOG  # noqa: E402
from broker.envelope import Envelope  # noqa: E402
from broker.identity import Identity, call_digest  # noqa: E402
from broker.settings import Settings  # noqa: E402
from orchestrator.embedded import open_services  # noqa: E402
from workers.app import make_app  # noqa: E402
from workers.config import WorkerSettings  # noqa: E402
from workers.context import WorkerContext  # noqa: E402
from workers.routing import CAPABILITY_TASK  # noqa: E402

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REDIS_URL = "redis://127.0.0.1:6379/13"
ENVELOPE = Envelope().model_dump(mode="json")


def _request(run_id: str, n: int) -> CallRequest:
    payload = CATALOG["text.generate"].normalize({"prompt": f"bench call {n}"})
    return CallRequest(run_id, 1, Identity("orchestrate/#0", (), n), "text.generate",
                       payload, call_digest(payload), "fp")


def _served(report: CallReport) -> CallReport:
    """A call the bench timed must have been executed or replayed, never refused."""
    if report.outcome not in (Outcome.EXECUTED, Outcome.REPLAYED):
        raise RuntimeError(f"bench call {report.identity} ended {report.outcome}: "
                           f"{report.error}")
    return report


def _timed(fn: Callable[[int], object], count: int) -> list[float]:
    out = []
    for n in range(count):
        started = time.perf_counter()
        fn(n)
        out.append((time.perf_counter() - started) * 1000)
    return out


def _ms(samples: list[float]) -> str:
    p90 = sorted(samples)[int(len(samples) * 0.9)]
    return f"{statistics.median(samples):7.2f} ms (p90 {p90:.2f})"


class Workers:
    def __init__(self, env: dict[str, str], queue: str) -> None:
        self.env, self.queue, self.procs = env, queue, []

    def start(self, count: int, app) -> None:
        names = []
        for i in range(count):
            name = f"bench{i}-{uuid.uuid4().hex[:6]}@{socket.gethostname()}"
            names.append(name)
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q",
                 self.queue, "-n", name, "--pool", "threads", "-c", "8", "-l", "WARNING",
                 "--without-mingle", "--without-gossip"], cwd=ROOT, env=self.env,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        missing = set(names)
        while missing:
            for reply in app.control.ping(destination=sorted(missing), timeout=0.5):
                missing -= set(reply)

    def stop(self) -> None:
        for proc in self.procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            proc.wait(20)
        self.procs = []


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--throughput", type=int, default=400)
    opts = parser.parse_args()

    db = f"revise_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{db}"'))
    home = Path(tempfile.mkdtemp(prefix="revise-bench-"))
    pg_url = PG_ADMIN.rsplit("/", 1)[0] + f"/{db}"
    prefix = f"bench{uuid.uuid4().hex[:6]}-"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REVISE_HOME": str(home / "workers"),
           "REVISE_DATABASE_URL": pg_url, "REVISE_REDIS_URL": REDIS_URL,
           "REVISE_LEDGER_BACKEND": "redis", "REVISE_CELERY_QUEUE_PREFIX": prefix}
    settings = Settings(home=home / "workers", database_url=pg_url, redis_url=REDIS_URL,
                        ledger_backend="redis")
    queue = WorkerSettings(queue_prefix=prefix)
    app = make_app(settings, queue)
    workers = Workers(env, app.routing.queue("capabilities"))
    rows: list[tuple[str, str]] = []
    try:
        # -- embedded: SQLite store + SQL ledger, in process
        embedded = open_services(Settings(home=home / "embedded"))
        broker = embedded.broker(Envelope())
        embedded.store.ensure_run("emb")
        embedded.store.add_revision("emb", "# bench", "d")
        emb_new = _timed(lambda n: _served(broker.execute(_request("emb", n))), opts.calls)
        emb_hit = _timed(lambda n: _served(broker.execute(_request("emb", n))), opts.calls)
        embedded.close()

        # -- in-process against the deployment's stores (PostgreSQL + Redis ledger)
        ctx = WorkerContext(settings, queue)
        ctx.store.ensure_run("direct")
        ctx.store.add_revision("direct", "# bench", "d")
        direct = ctx.broker(Envelope())
        pg_new = _timed(lambda n: _served(direct.execute(_request("direct", n))), opts.calls)
        pg_hit = _timed(lambda n: _served(direct.execute(_request("direct", n))), opts.calls)
        ledger = ctx.ledger
        assert ledger is not None, "the bench runs the deployment with the Redis ledger"
        led = _timed(lambda n: ledger.paid("direct", "text.generate",
                                           _request("direct", n).digest, 2), opts.calls)
        slot = _timed(lambda n: ctx.store.get_slot("direct", _request("direct", n).identity),
                      opts.calls)

        # -- through Celery, one broker worker process
        workers.start(1, app)
        ctx.store.ensure_run("celery")
        ctx.store.add_revision("celery", "# bench", "d")
        cap_queue = app.routing.queue("capabilities")

        def remote(n: int, run_id: str = "celery") -> CallReport:
            result = app.send_task(CAPABILITY_TASK, args=[_request(run_id, n).to_wire(),
                                                          ENVELOPE], queue=cap_queue)
            return _served(CallReport.from_wire(result.get(timeout=60)))

        cel_new = _timed(remote, opts.calls)
        cel_hit = _timed(remote, opts.calls)

        def throughput(run_id: str) -> float:
            ctx.store.ensure_run(run_id)
            ctx.store.add_revision(run_id, "# bench", "d")
            started = time.perf_counter()
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(lambda n: remote(n, run_id), range(opts.throughput)))
            return opts.throughput / (time.perf_counter() - started)

        one = throughput("tp1")
        workers.start(1, app)
        two = throughput("tp2")
        ctx.store.close()

        rows = [
            ("embedded new call (SQLite, SQL ledger)", _ms(emb_new)),
            ("embedded replay hit", _ms(emb_hit)),
            ("in-process new call (PostgreSQL, Redis ledger)", _ms(pg_new)),
            ("in-process replay hit (PostgreSQL)", _ms(pg_hit)),
            ("  store: one slot read (PostgreSQL)", _ms(slot)),
            ("  ledger: one Redis lookup", _ms(led)),
            ("Celery new call (1 broker worker)", _ms(cel_new)),
            ("Celery replay hit", _ms(cel_hit)),
            ("  queue + lease overhead per call (Celery hit - in-process hit)",
             f"{statistics.median(cel_hit) - statistics.median(pg_hit):7.2f} ms"),
            ("ratio Celery/embedded, new call",
             f"{statistics.median(cel_new) / statistics.median(emb_new):7.2f}x"),
            ("ratio Celery/embedded, replay hit",
             f"{statistics.median(cel_hit) / statistics.median(emb_hit):7.2f}x"),
            ("throughput, 1 broker worker process (-c 8)", f"{one:7.1f} calls/s"),
            ("throughput, 2 broker worker processes", f"{two:7.1f} calls/s"),
            ("ratio 2 workers / 1 worker", f"{two / one:7.2f}x"),
        ]
    finally:
        workers.stop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        admin.dispose()
    width = max(len(name) for name, _ in rows)
    print(f"{'measure':<{width}}  value   ({opts.calls} calls each, median)")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()

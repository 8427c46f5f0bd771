"""The queue's floor: the deployment's hops with nothing of Revise in them.

``concurrent(jobs, calls)`` runs the shape of a Revise job through Celery with the
deployment's own Celery configuration (``workers.app.celery_config``: Redis broker and
result backend, late acks, prefetch 1, started state, task events for Flower) and
no-op tasks: the client sends a job to a dispatch worker, which queues it for a
sandbox worker (prefork), which starts one process sandbox (bubblewrap, the
interpreter running ``pass``) and then asks a broker worker for each call in turn,
waiting for each answer. No store, no ledger, no checker, no runtime.

With a ``database_url`` the broker worker also makes the two durable writes the
contract asks of every executed call (ARCHITECTURE.md section 4: the attempt record,
committed before the provider is called, then the result with the attempt settled),
each one PostgreSQL transaction, as the least any implementation of this design pays.

What Revise adds on top of these figures is ours to cut; what the floor costs is
not, so a target above the floor's calls/s cannot be met with this stack on this
machine. Workers run as ``celery -A peers.floor worker`` (``bench`` on the path).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from celery import Celery

from broker.settings import Settings
from workers.app import celery_config
from workers.config import WorkerSettings
from workers.routing import Routing

ROOT = Path(__file__).resolve().parents[2]
ADMIT, JOB, CALL = "floor.admit", "floor.job", "floor.call"
_PREFIX = os.environ.get("REVISE_FLOOR_PREFIX", "floor-")


def make_app(redis_url: str, prefix: str) -> Celery:
    routing = Routing(prefix)
    app = Celery("revise-floor")
    app.conf.update(celery_config(Settings(redis_url=redis_url),
                                  WorkerSettings(queue_prefix=prefix), routing))
    app.conf.beat_schedule = {}
    return app


app = make_app(os.environ.get("REVISE_REDIS_URL", "redis://127.0.0.1:6379/13"), _PREFIX)
_runner: Any = None
_engine: Any = None
_TABLES = (
    "CREATE TABLE IF NOT EXISTS floor_attempts (id BIGSERIAL PRIMARY KEY, job TEXT NOT NULL,"
    " n INTEGER NOT NULL, status TEXT NOT NULL, UNIQUE (job, n))",
    "CREATE TABLE IF NOT EXISTS floor_results (job TEXT NOT NULL, n INTEGER NOT NULL,"
    " result JSONB NOT NULL, PRIMARY KEY (job, n))")


def _sandbox() -> Any:
    global _runner
    if _runner is None:
        from sandbox.bwrap import find_python
        from sandbox.runner import ProcessRunner

        _runner = ProcessRunner(command=(find_python(), "-I", "-S", "-B", "-c", "pass"))
    return _runner


@app.task(name=ADMIT, bind=True)
def admit(self: Any, calls: int) -> str:
    job_id = f"{self.request.id}/job"
    app.send_task(JOB, args=[calls], task_id=job_id, queue=f"{_PREFIX}sandbox")
    return job_id


@app.task(name=JOB, bind=True)
def job(self: Any, calls: int) -> int:
    from broker.envelope import SandboxLimits
    from sandbox.bwrap import private_dir
    from sandbox.job import remove_rpc_dir

    with tempfile.TemporaryDirectory(prefix="fl-", dir=private_dir()) as tmp:
        rpc_dir = Path(tmp) / "rpc"
        launched = _sandbox().launch(self.request.id, rpc_dir, SandboxLimits())
        try:
            if launched.sandbox.wait(30) != 0:
                raise RuntimeError(f"the floor's sandbox failed: {launched.sandbox.output()}")
        finally:
            launched.sandbox.cleanup()
            launched.listener.close()
            remove_rpc_dir(rpc_dir)
    app.conf.task_send_sent_event = False  # as workers.app.quiet_capability_sends does
    for i in range(calls):
        app.send_task(CALL, args=[self.request.id, i], queue=f"{_PREFIX}capabilities").get(
            timeout=60, disable_sync_subtasks=False)
    return calls


@app.task(name=CALL)
def call(job_id: str, i: int) -> int:
    url = os.environ.get("REVISE_FLOOR_DATABASE_URL")
    if url:
        _durable_call(url, job_id, i)
    return i


def _durable_call(url: str, job_id: str, i: int) -> None:
    global _engine
    from sqlalchemy import create_engine, text

    if _engine is None:
        _engine = create_engine(url, pool_size=8)
    where = {"job": job_id, "n": i}
    with _engine.begin() as conn:  # the attempt, durable before the (no-op) provider call
        attempt = conn.execute(text(
            "INSERT INTO floor_attempts (job, n, status) VALUES (:job, :n, 'pending') "
            "RETURNING id"), where).scalar_one()
    with _engine.begin() as conn:  # the result, and the attempt settled
        conn.execute(text("INSERT INTO floor_results (job, n, result) VALUES "
                          "(:job, :n, '{}'::jsonb)"), where)
        conn.execute(text("UPDATE floor_attempts SET status = 'succeeded' WHERE id = :id"),
                     {"id": attempt})


class CeleryFloor:
    """Dispatch (threads, 4), sandbox (prefork, 4) and two broker workers (threads, 8),
    as ``peers.revise.ReviseCelery`` starts Revise's; one broker worker can be switched
    off. ``database_url``: the broker workers make the contract's two writes per call."""

    def __init__(self, home: Path, redis_url: str, database_url: str | None = None) -> None:
        self.prefix = f"floor{uuid.uuid4().hex[:8]}-"
        self.app = make_app(redis_url, self.prefix)
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'bench'}",
               "REVISE_REDIS_URL": redis_url, "REVISE_FLOOR_PREFIX": self.prefix,
               "REVISE_HOME": str(home), "REVISE_FLOOR_DATABASE_URL": database_url or ""}
        if database_url:
            from sqlalchemy import create_engine, text

            engine = create_engine(database_url)
            with engine.begin() as conn:
                for table in _TABLES:
                    conn.execute(text(table))
            engine.dispose()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []
        try:
            for role, pool, concurrency, index in (("dispatch", "threads", 4, 0),
                                                   ("sandbox", "prefork", 4, 0),
                                                   ("capabilities", "threads", 8, 0),
                                                   ("capabilities", "threads", 8, 1)):
                name = f"{role}{index}-{self.prefix}@floor"
                self.names.append(name)
                with open(home / f"{role}{index}.log", "wb") as log:
                    self.procs.append(subprocess.Popen(
                        [sys.executable, "-m", "celery", "-A", "peers.floor", "worker",
                         "-Q", f"{self.prefix}{role}", "-n", name, "--pool", pool,
                         "-c", str(concurrency), "-l", "WARNING", "--without-mingle",
                         "--without-gossip"], cwd=ROOT, env=env, stdout=log,
                        stderr=subprocess.STDOUT, start_new_session=True))
            from tests.workers.conftest import wait_for_workers  # not in the workers

            wait_for_workers(self.app, self.names, 60, home)
        except BaseException:
            self.close()
            raise
        self._second_on = True

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def close(self) -> None:
        from tests.workers.conftest import stop_processes

        stop_processes(self.procs)

    def broker_workers(self, count: int) -> None:
        want = count == 2
        if want == self._second_on:
            return
        queue, second = f"{self.prefix}capabilities", [self.names[-1]]
        if want:
            self.app.control.add_consumer(queue, destination=second, reply=True)
        else:
            self.app.control.cancel_consumer(queue, destination=second, reply=True)
        self._second_on = want
        time.sleep(0.5)

    def concurrent(self, jobs: int, calls: int) -> float:
        started = time.perf_counter()
        admitted = [self.app.send_task(ADMIT, args=[calls], queue=f"{self.prefix}dispatch")
                    for _ in range(jobs)]
        for handle in admitted:
            job_id = handle.get(timeout=600)
            done = self.app.AsyncResult(job_id).get(timeout=600)
            if done != calls:
                raise RuntimeError(f"a floor job answered {done!r}, not {calls}")
        return time.perf_counter() - started

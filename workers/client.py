"""The queue client: submit a run to the Celery deployment and wait for its run JSON.

``Client(settings).submit(script, args, envelope, run_id)`` sends one job to
the ``dispatch`` queue and returns a ``JobHandle``. The handle learns the
revision from the dispatcher's answer and then reads the run store, which is
the truth about runs, identities and attempts: ``result()`` is the same object
``revise run --json`` prints (the revision's stored report).

The job is built as a ``workers.messages.DispatchJob`` before it is sent, so a
bad run id, script text, args value or envelope is refused here with the same
clear error the dispatcher would give, and nothing is queued.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from broker.envelope import Envelope
from broker.errors import BrokerError, RunNotFound, error_from_json
from broker.names import validate_name
from broker.settings import Settings
from broker.sqlstore import SqlStore
from orchestrator.source import decode_source
from workers.app import ReviseCelery, make_app
from workers.config import WorkerSettings
from workers.messages import DispatchJob, parse_message, require_utf8
from workers.outcome import answer_of
from workers.routing import DISPATCH_TASK

QUEUED, DISPATCHING, RUNNING = "queued", "dispatching", "running"


class Client:
    def __init__(self, settings: Settings | None = None, *,
                 queue: WorkerSettings | None = None) -> None:
        self.settings = settings or Settings()
        self.app: ReviseCelery = make_app(self.settings, queue or WorkerSettings())
        self._store: SqlStore | None = None

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = SqlStore.open(self.settings.resolved_database_url)
        return self._store

    def submit(self, script: bytes | str, args: Any, envelope: Envelope | None,
               run_id: str) -> JobHandle:
        validate_name("run id", run_id)
        if isinstance(script, str):  # before decode_source, which would crash on a surrogate
            require_utf8("script", script)
        job_id = uuid.uuid4().hex
        job = {"job_id": job_id, "run_id": run_id, "script": decode_source(script).text,
               "args": args, "envelope": (envelope or Envelope()).model_dump(mode="json")}
        parse_message(DispatchJob, job, "job")
        self.app.send_task(DISPATCH_TASK, args=[job], task_id=job_id,
                           queue=self.app.routing.queue("dispatch"))
        return JobHandle(self, job_id, run_id)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        self.app.close()


class JobHandle:
    def __init__(self, client: Client, job_id: str, run_id: str) -> None:
        self.client = client
        self.job_id = job_id
        self.run_id = run_id
        self._dispatched: dict[str, Any] | None = None

    def _dispatch_answer(self) -> dict[str, Any] | None:
        if self._dispatched is None:
            result = self.client.app.AsyncResult(self.job_id)
            if result.ready():
                # A refused job is a task FAILURE that carries the answer (workers.outcome).
                carried = answer_of(result.result) if result.failed() else None
                if carried is not None:
                    self._dispatched = carried
                elif result.failed():
                    raise BrokerError(f"job {self.job_id}: the dispatcher failed: "
                                      f"{_describe(result.result)}", job_id=self.job_id)
                else:
                    self._dispatched = result.result
        return self._dispatched

    def status(self) -> str:
        """queued | dispatching | running | succeeded | failed | stopped."""
        answer = self._dispatch_answer()
        if answer is None:
            state = self.client.app.AsyncResult(self.job_id).state
            return DISPATCHING if state == "STARTED" else QUEUED
        if answer["error"] is not None:
            return "stopped"
        revision = self.client.store.get_revision(self.run_id, answer["revision"])
        if revision is None:
            raise RunNotFound(f"revision {answer['revision']} of run {self.run_id!r} is "
                              "missing from the store", run_id=self.run_id)
        return RUNNING if revision.status == "running" else revision.status

    def done(self) -> bool:
        return self.status() not in (QUEUED, DISPATCHING, RUNNING)

    def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """Block until the job finished and return its run JSON; TimeoutError after
        ``timeout`` seconds (the job keeps running)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.job_id} (run {self.run_id}) is still "
                                   f"{self.status()} after {timeout:.0f} s; wait again or "
                                   f"check `revise show {self.run_id}`")
            time.sleep(delay)
            delay = min(delay * 1.5, 0.25)
        return self.result()

    def result(self) -> dict[str, Any]:
        """The run JSON; raises the dispatcher's error for input it refused outright."""
        answer = self._dispatch_answer()
        if answer is None:
            raise RuntimeError(f"job {self.job_id} has not been dispatched yet; wait() first")
        if answer["error"] is not None:
            raise error_from_json(answer["error"])
        revision = self.client.store.get_revision(self.run_id, answer["revision"])
        if revision is None or revision.status == "running" or revision.summary is None:
            raise RuntimeError(f"job {self.job_id} is still running; wait() first")
        return revision.summary


def _describe(exc: object) -> str:
    """A task's exception as its message, never a class repr (Celery rebuilds an exception
    it cannot import as a bare ``Exception`` whose text names the original class)."""
    if isinstance(exc, BaseException):
        text = str(exc) or "no message"
        name = type(exc).__name__
        return text if name == "Exception" else f"{name}: {text}"
    return str(exc)

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

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from broker.envelope import Envelope
from broker.errors import (
    DispatchFailed,
    QueueUnavailable,
    ReviseError,
    RunNotFound,
    StoreUnavailable,
    error_from_json,
)
from broker.names import validate_name
from broker.outage import is_queue_outage, queue_unavailable
from broker.records import AttemptStatus, JobStatus, RevisionRecord, RevisionStatus
from broker.settings import Settings, mask_url
from broker.sqlstore import SqlStore
from orchestrator.source import decode_source
from workers.app import ReviseCelery, make_app
from workers.config import WorkerSettings
from workers.messages import DispatchJob, parse_message
from workers.outbox import keep
from workers.outcome import answer_of
from workers.routing import DISPATCH_TASK, enqueue

log = logging.getLogger("revise.client")

QUEUED, DISPATCHING, RUNNING = "queued", "dispatching", RevisionStatus.RUNNING
_UNFINISHED = (QUEUED, DISPATCHING, RUNNING)


class Client:
    def __init__(self, settings: Settings | None = None, *,
                 queue: WorkerSettings | None = None) -> None:
        self.settings = settings or Settings()
        self.app: ReviseCelery = make_app(self.settings, queue or WorkerSettings())
        # A wait looks at the store between naps on the result backend, and retries: an
        # outage of Redis costs a nap, not Celery's twenty one-second reconnects in one.
        self.app.conf.result_backend_transport_options = {
            **self.app.conf.get("result_backend_transport_options", {}),
            "retry_policy": {"max_retries": 1, "interval_start": 0.2, "interval_step": 0,
                             "interval_max": 0.2}}
        self._store: SqlStore | None = None
        self._broker_redis: Any = None

    @property
    def store(self) -> SqlStore:
        if self._store is None:
            self._store = SqlStore.open(self.settings.resolved_database_url)
        return self._store

    def submit(self, script: bytes | str, args: Any, envelope: Envelope | None,
               run_id: str, *, send: bool = True) -> JobHandle:
        """The job for SCRIPT as run ``run_id``, queued (``send``: else the caller sends it
        with ``handle.send()``, again under the same job id if Redis did not answer)."""
        validate_name("run id", run_id)
        job_id = uuid.uuid4().hex
        job = {"job_id": job_id, "run_id": run_id, "script": decode_source(script).text,
               "args": args, "envelope": (envelope or Envelope()).model_dump(mode="json")}
        parse_message(DispatchJob, job, "job")
        handle = JobHandle(self, job_id, run_id, job)
        if send:
            handle.send()
        return handle

    @property
    def broker_redis(self) -> Any:
        if self._broker_redis is None:
            import redis

            self._broker_redis = redis.Redis.from_url(self.settings.resolved_broker_url,
                                                      socket_timeout=10,
                                                      socket_connect_timeout=5)
        return self._broker_redis

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        self.app.close()


_PROGRESS_WORDS = ((AttemptStatus.SUCCEEDED, "committed"),
                   (AttemptStatus.PENDING, "in flight"),
                   (AttemptStatus.UNCERTAIN, "uncertain"), (AttemptStatus.FAILED, "failed"),
                   (AttemptStatus.UNRESOLVED, "unresolved"))

# What a wait survives: the store or Redis (broker, result backend) not answering.
TRANSIENT = (StoreUnavailable, QueueUnavailable)


class JobHandle:
    def __init__(self, client: Client, job_id: str, run_id: str,
                 job: dict[str, Any] | None = None) -> None:
        self.client = client
        self.job_id = job_id
        self.run_id = run_id
        self._job = job  # the dispatch message, to send again if Redis lost it
        self._dispatched: dict[str, Any] | None = None
        self._sent_at = time.monotonic()
        self._told = False  # the sandbox task's result said the job ended
        self.resent = 0

    def send(self) -> None:
        with _transport(self.client, "queueing the job"):
            self.client.broker_redis.ping()  # a clear error now, not Celery's retry loop
            enqueue(self.client.app, DISPATCH_TASK, self.client.app.routing.queue("dispatch"),
                    args=[self._job], task_id=self.job_id)
        self._sent_at = time.monotonic()
        try:  # for the reconciler, should a dispatcher lose it as it takes it
            keep(self.client.broker_redis, self.client.app.routing.prefix, self.job_id,
                 self._job)
        except Exception as exc:  # queued already: a lost copy is the only thing at stake
            log.warning("job %s is queued, but not kept against its loss: %s", self.job_id,
                        exc)

    def _dispatch_answer(self) -> dict[str, Any] | None:
        if self._dispatched is None:
            result = self.client.app.AsyncResult(self.job_id)
            with _transport(self.client, "reading the dispatcher's answer"):
                if result.ready():
                    # A refused job is a task FAILURE that carries the answer
                    # (workers.outcome).
                    carried = answer_of(result.result) if result.failed() else None
                    if carried is not None:
                        self._dispatched = carried
                    elif result.failed():
                        raise DispatchFailed(f"job {self.job_id}: the dispatcher failed: "
                                             f"{_describe(result.result)}", job_id=self.job_id)
                    else:
                        self._dispatched = result.result
        if self._dispatched is None:
            # The store is the truth about accepted jobs: the answer in Redis may be lost.
            job = self.client.store.get_job(self.job_id)
            if job is not None:
                self._dispatched = {"job_id": self.job_id, "run_id": self.run_id,
                                    "accepted": True, "revision": job.revision,
                                    "report": None, "error": None}
        return self._dispatched

    def _resend_if_lost(self) -> None:
        """A dispatch message Redis lost before any dispatcher took it is sent again
        (same task id; the dispatcher finds a job it accepted already in the store)."""
        settings = self.client.settings
        if self._job is None or self.resent >= settings.max_requeues or \
                time.monotonic() - self._sent_at < settings.requeue_after_seconds:
            return
        from workers.transport import Transport

        with _transport(self.client, "looking for the job's message"):
            state = self.client.app.AsyncResult(self.job_id).state
            queued = Transport(self.client.broker_redis).holds(
                self.client.app.routing.queue("dispatch"), self.job_id)
        if state == "PENDING" and not queued:
            self.send()
            self.resent += 1

    def status(self) -> str:
        """queued | dispatching | running | succeeded | failed | stopped."""
        answer = self._dispatch_answer()
        if answer is None:
            with _transport(self.client, "reading the job's state"):
                state = self.client.app.AsyncResult(self.job_id).state
            return DISPATCHING if state == "STARTED" else QUEUED
        if answer["error"] is not None:
            return "stopped"
        return self._revision(answer["revision"]).status

    def _revision(self, number: int) -> RevisionRecord:
        """The revision the dispatcher answered for, from this client's run store: the
        dispatcher stored it before it answered, so missing here means the workers use
        another run store (this shell lacks their REVISE_DATABASE_URL)."""
        revision = self.client.store.get_revision(self.run_id, number)
        if revision is None:
            url = mask_url(self.client.settings.resolved_database_url)
            raise RunNotFound(
                f"revision {number} of run {self.run_id!r} is missing from this client's run "
                f"store ({url}), though the dispatcher answered for it: the workers wrote it "
                "to another run store; set REVISE_DATABASE_URL as the workers have it "
                f"(`revise config` where they run) and look again: `revise show {self.run_id}`",
                run_id=self.run_id)
        return revision

    def done(self) -> bool:
        """The job ended (succeeded, failed or stopped), read once now."""
        return self.status() not in _UNFINISHED

    def progress(self) -> str:
        """One line on where the job is: queued, dispatched, or its revision's calls so
        far (committed, in flight at broker workers, failed) and whether it is parked."""
        return self._progress(self.status())

    def _progress(self, status: str) -> str:
        answer = self._dispatched
        if answer is None or answer.get("revision") is None:
            return f"run {self.run_id}: job {status}"
        revision = answer["revision"]
        counts = Counter(attempt.status for attempt in
                         self.client.store.list_attempts(self.run_id)
                         if attempt.revision == revision)
        job = self.client.store.job_for_revision(self.run_id, revision)
        parked = job is not None and job.status is JobStatus.PARKED
        where = f"{status}, parked" if parked else status
        calls = ", ".join(f"{counts[key]} {word}" for key, word in _PROGRESS_WORDS
                          if counts.get(key))
        return f"run {self.run_id} revision {revision} {where}" + (f": {calls}" if calls
                                                                     else "")

    def wait(self, timeout: float | None = None,
             progress: Callable[[str], None] | None = None,
             watch: Callable[[str], None] | None = None,
             since: float | None = None) -> dict[str, Any]:
        """Block until the job finished and return its run JSON; TimeoutError after
        ``timeout`` seconds (the job keeps running). An outage of the store or Redis is
        waited out: ``progress`` hears what the wait is for, about every 5 s. ``watch``
        hears ``progress()`` about every second while it changes. ``since``: when the
        caller's wait began (``time.monotonic()``; default: now): the timeout's message
        names the wait from there to the deadline."""
        since = time.monotonic() if since is None else since
        deadline = None if timeout is None else time.monotonic() + timeout
        delay, said, last_status = 0.01, 0.0, "queued"
        watched, shown = 0.0, ""
        redis_away = False  # seen gone during this wait: no broadcast is asked then

        def tell(why: str) -> None:  # at most every 5 s
            nonlocal said
            if progress is not None and time.monotonic() - said > 5:
                progress(f"job {self.job_id} (run {self.run_id}) {why}")
                said = time.monotonic()

        while True:
            try:
                last_status = self.status()  # once a look: it reads Redis and the store
                if last_status not in _UNFINISHED:
                    return self.result()
                if last_status == QUEUED:
                    self._resend_if_lost()
                if watch is not None and time.monotonic() - watched >= 1.0:
                    line, watched = self._progress(last_status), time.monotonic()
                    if line != shown:
                        watch(line)
                        shown = line
            except TRANSIENT as exc:
                if self._dispatched is not None and self._dispatched.get("error"):
                    raise  # the dispatcher's final answer, not an outage seen from here
                tell(f"was {last_status}; still waiting, because {exc.message}")
                delay = 1.0
                redis_away = redis_away or isinstance(exc, QueueUnavailable)
            if deadline is not None and time.monotonic() >= deadline:
                waited = deadline - since  # the caller's whole wait, not what was left
                raise TimeoutError(f"job {self.job_id} (run {self.run_id}) is still "
                                   f"{last_status} after {waited:.0f} s (as far as could be "
                                   f"told){'' if redis_away else self._unserved(last_status)}"
                                   "; the job is not cancelled (it runs, or waits for a "
                                   f"worker): `revise show {self.run_id}` follows its run "
                                   "once dispatched")
            try:
                self._nap(delay)
            except QueueUnavailable as exc:
                tell(f"is {last_status}; still waiting (on the store alone), because "
                     f"{exc.message}")
                redis_away = True
            delay = min(delay * 1.5, 0.25) if delay < 1.0 else 0.25

    def _unserved(self, status: str) -> str:
        """What a job that waits too long may wait for: no worker of this stack (its
        queue prefix) on a queue it needs, as its workers answer a 1 s broadcast."""
        roles = {QUEUED: ("dispatch",), RUNNING: ("sandbox", "capabilities")}.get(status, ())
        if not roles:
            return ""
        import redis

        app = self.client.app
        try:  # a broadcast waits out a Redis that is away; a ping of 1 s does not
            redis.Redis.from_url(self.client.settings.resolved_broker_url, socket_timeout=1,
                                 socket_connect_timeout=1).ping()
            replies = app.control.inspect(timeout=1.0).active_queues() or {}
        except Exception:  # Redis away: the wait said so already; nothing more to tell
            return ""
        consumed = {queue.get("name") for queues in replies.values() for queue in queues}
        missing = [app.routing.queue(role) for role in roles
                   if app.routing.queue(role) not in consumed]
        if not missing:
            return ""
        prefix = app.routing.prefix
        shared = f"with the same REVISE_CELERY_QUEUE_PREFIX ({prefix!r})" if prefix \
            else "without REVISE_CELERY_QUEUE_PREFIX"
        return (f"; no worker consumes {' or '.join(missing)} (none of this stack's workers "
                f"said so within 1 s): start the stack (`honcho start`), its workers {shared}")

    def _nap(self, seconds: float) -> None:
        """Wait for the next look at the store: on the sandbox task's result once the job
        is queued for a sandbox (the backend tells at once when it ended), else a sleep."""
        if self._told or not (self._dispatched and self._dispatched.get("accepted")):
            time.sleep(seconds)
            return
        from celery.exceptions import TimeoutError as CeleryTimeout

        from workers.recovery import sandbox_task_id

        result = self.client.app.AsyncResult(sandbox_task_id(self.job_id))
        started = time.monotonic()
        try:
            with _transport(self.client, "listening for the end of the job's sandbox task"):
                try:
                    result.get(timeout=seconds, propagate=False, disable_sync_subtasks=False)
                except RuntimeError as exc:  # Celery's 'retry limit exceeded' on reconnect
                    if not is_queue_outage(exc):
                        raise
                    raise OSError(str(exc.__cause__ or exc)) from exc
            self._told = True  # it ended: from now on the store is all there is to read
        except CeleryTimeout:
            pass
        except QueueUnavailable:  # the store decides, in its time
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))
            raise
        finally:
            _stop_listening(result)

    def result(self) -> dict[str, Any]:
        """The run JSON; raises the dispatcher's error for input it refused outright."""
        answer = self._dispatch_answer()
        if answer is None:
            raise RuntimeError(f"job {self.job_id} has not been dispatched yet; wait() first")
        if answer["error"] is not None:
            raise _refusal(self.job_id, answer["error"])
        revision = self._revision(answer["revision"])
        if revision.status is RevisionStatus.RUNNING or revision.summary is None:
            raise RuntimeError(f"job {self.job_id} is still running; wait() first")
        return revision.summary


def _stop_listening(result: Any) -> None:
    """End ``result``'s subscription now, where an outage is caught. Left to its
    ``__del__`` (at the latest when the CLI exits), a Redis that is away by then makes
    Celery print a traceback."""
    try:
        result.backend.remove_pending_result(result)
    except Exception:  # Redis is away: the subscription ended with the connection
        pass
    result.backend = None


def _refusal(job_id: str, error: Any) -> ReviseError:
    """The dispatcher's refusal as its typed error; an answer that does not describe one
    (Redis is writable by anyone) is itself the error."""
    try:
        return error_from_json(error)
    except ValueError as exc:
        return DispatchFailed(f"job {job_id}: the dispatcher's answer holds no error this "
                              f"Revise knows ({exc})", job_id=job_id)


def _describe(exc: object) -> str:
    """A task's exception as its message, never a class repr (Celery rebuilds an exception
    it cannot import as a bare ``Exception`` whose text names the original class)."""
    if isinstance(exc, BaseException):
        text = str(exc) or "no message"
        name = type(exc).__name__
        return text if name == "Exception" else f"{name}: {text}"
    return str(exc)


@contextmanager
def _transport(client: Client, action: str) -> Iterator[None]:
    """Redis (broker or result backend) errors become ``QueueUnavailable`` naming the URL
    (without a password): never a raw client traceback."""
    import kombu.exceptions
    import redis

    try:
        yield
    except (redis.RedisError, kombu.exceptions.OperationalError, OSError) as exc:
        raise queue_unavailable(client.settings.resolved_broker_url, action, exc) from None

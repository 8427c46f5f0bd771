"""The one Celery app of the deployment: ``celery -A workers.app worker -Q <queue>``.

Redis is broker and result backend; JSON is the only serialization. Tasks are
acknowledged late and rejected (requeued) when their worker process dies, so a
crash redelivers; the job lease (``workers.lease``) turns redeliveries and
visibility-timeout duplicates into no-ops and bounds crash loops. Each worker
takes one message at a time (prefetch 1) so a long job never hides a queued
one from an idle worker.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
from functools import cached_property
from typing import Any

from celery import Celery, Task
from celery.signals import after_setup_logger, beat_init, worker_init, worker_ready

from broker.settings import Settings, SettingsError
from workers.config import WorkerSettings
from workers.context import WorkerContext
from workers.kombu_redis import share_clients, tolerate_released_channels
from workers.routing import CAPABILITY_TASK, SWEEP_TASK, Routing
from workers.variables import warn_unknown

log = logging.getLogger("revise.worker")
TASK_MODULES = ("workers.dispatcher", "workers.sandbox_worker", "workers.capability",
                "workers.reconciler", "workers.preflight")


class ReviseCelery(Celery):
    def __init__(self, settings: Settings, queue: WorkerSettings) -> None:
        super().__init__("revise", include=list(TASK_MODULES), task_cls=ReviseTask)
        self.revise_settings = settings
        self.queue_settings = queue
        self.routing = Routing(queue.queue_prefix)
        self.conf.update(celery_config(settings, queue, self.routing))


class ReviseTask(Task):
    """Base task: ``self.context`` is this worker process's services, opened on first use."""

    @cached_property
    def context(self) -> WorkerContext:
        app = self.app
        assert isinstance(app, ReviseCelery)
        return WorkerContext(app.revise_settings, app.queue_settings)


def celery_config(settings: Settings, queue: WorkerSettings, routing: Routing) -> dict:
    transport = {"visibility_timeout": queue.visibility_timeout}
    if queue.unacked_restore_seconds:
        transport |= {"unacked_restore_interval": queue.unacked_restore_seconds,
                      "unacked_restore_throttle": 1}
    return {
        "broker_url": settings.resolved_broker_url,
        "result_backend": settings.resolved_result_backend,
        "broker_transport_options": transport,
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,  # never give up on Redis: outages end
        # A Redis loss does not cancel running tasks: the store is the truth, the job lease
        # makes a redelivered copy a no-op, and a sandbox job's capability waits watch the
        # store (cancelling would kill every running sandbox job on a Redis restart).
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_queues": routing.queues(),
        "task_routes": routing.routes(),
        "task_default_queue": routing.queue("dispatch"),
        "task_track_started": True,
        "result_extended": True,  # the result names the worker that ran the task
        "result_expires": queue.result_expires_seconds,
        "worker_send_task_events": True,  # Flower sees task flow without `enable_events`
        "task_send_sent_event": True,
        "beat_schedule": {"sweep-unresolved-attempts": {
            "task": SWEEP_TASK, "schedule": queue.reconcile_interval}},
    } | monitoring_config(queue, routing)


def monitoring_config(queue: WorkerSettings, routing: Routing) -> dict:
    """What Flower sees. Events and remote control travel on exchanges named after the
    queue prefix, so a stack sees only its own workers and tasks on a shared Redis (the
    defaults, ``celeryev`` and ``celery``, are every stack's). The periodic sweep sends no
    events and keeps no result: every few seconds it would fill Flower's task list and
    Redis (its findings are logged and written to the runs it touches)."""
    config: dict = {"task_annotations": {SWEEP_TASK: {"send_events": False,
                                                      "ignore_result": True}}}
    if routing.prefix:
        config |= {"event_exchange": f"{routing.prefix}celeryev",
                   "control_exchange": f"{routing.prefix}celery"}
    return config


tolerate_released_channels()
share_clients()


@worker_init.connect
def quiet_capability_sends(sender: Any = None, **_: Any) -> None:
    """A sandbox worker sends a capability task per wave of new calls; a ``task-sent``
    event for each doubled the cost of sending it, and capability tasks send no other
    events either (``workers.capability``): Flower lists the jobs."""
    app = getattr(sender, "app", None)
    if isinstance(app, ReviseCelery) and app.routing.queue("sandbox") in (
            app.amqp.queues.consume_from or {}):
        app.conf.task_send_sent_event = False


@worker_init.connect
def share_result_backend(sender: Any = None, **_: Any) -> None:
    """One result backend, and so one Redis connection pool, for all of a worker's
    threads. Celery makes one per thread unless told otherwise: each of a sandbox
    worker's 256 threads made a backend, a pool and a connection on its first task, all
    at once when a burst of jobs arrived. A worker only stores results, which is safe to
    share; a client waiting on results keeps one per thread (``workers.client``: its
    result consumer's pub/sub is not). Made here, before any thread asks for it: threads
    that ask at once for a backend not yet made each make one."""
    app = getattr(sender, "app", None)
    if isinstance(app, ReviseCelery):
        app.conf.result_backend_thread_safe = True
        app.backend  # noqa: B018  (made and cached now)


@beat_init.connect
def quiet_beat_sends(sender: Any = None, **_: Any) -> None:
    """The beat sends only the sweep; its ``task-sent`` event would put it in Flower's
    task list anyway (the sweep task itself sends none, see ``monitoring_config``)."""
    app = getattr(sender, "app", None)
    if isinstance(app, ReviseCelery):
        app.conf.task_send_sent_event = False


@beat_init.connect
def end_with_its_worker(sender: Any = None, **_: Any) -> None:
    """The beat a worker embeds (``-B``, the reconciler) runs in a child process that
    outlived a SIGKILLed worker, so a restarted reconciler ran two beats. It now dies
    with its worker (Linux: the parent-death signal)."""
    from billiard.process import current_process

    if current_process().name != "Beat" or not sys.platform.startswith("linux"):
        return
    import ctypes

    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # the worker died before the signal was asked for
        os.kill(os.getpid(), signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


@worker_ready.connect
def freeze_startup_objects(sender: Any = None, **_: Any) -> None:
    """What a worker holds once started (its modules, the app, Celery, SQLAlchemy and
    pydantic: a few hundred thousand objects that live as long as it does) leaves the
    garbage collector's view. A full collection walked them all, about 150 ms of CPU
    each time in a busy worker, for nothing it could free: measured over 100 jobs, full
    collections were half of the sandbox and broker workers' collection time, about 6 %
    of their CPU."""
    if isinstance(getattr(sender, "app", None), ReviseCelery):
        gc.freeze()


@after_setup_logger.connect
def quiet_libraries(**_: Any) -> None:
    """Alembic says which dialect it migrates at INFO each time a process opens the store
    (two lines per task process), httpx every request a broker worker sends and Celery
    every capability task it receives and finishes (three lines a call): of no use to
    whoever reads a worker's log, and at hundreds of calls a second a cost (each line is
    formatted, then relayed by honcho)."""
    for name in ("alembic", "httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)
    from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS  # a worker's, not a client's

    quiet = QuietTaskLines(CAPABILITY_TASK, (LOG_RECEIVED, LOG_SUCCESS))
    for name in ("celery.worker.strategy", "celery.app.trace"):  # where they are logged
        logger = logging.getLogger(name)
        if not any(isinstance(f, QuietTaskLines) for f in logger.filters):
            logger.addFilter(quiet)


class QuietTaskLines(logging.Filter):
    """Celery's two routine INFO lines of one task name, 'received' and 'succeeded',
    left out; its failures are still said. A capability task is a call: those two lines
    cost a broker worker about 1.3 ms of CPU a call (formatted and written, then relayed
    by honcho), a quarter of what the call costs it, and say nothing its job's own lines,
    a failure's line and `revise show` do not."""

    def __init__(self, task_name: str, routine: tuple[str, ...]) -> None:
        super().__init__()
        self.task_name = task_name
        self.routine = routine  # the lines' formats, as Celery logs them

    def filter(self, record: logging.LogRecord) -> bool:
        data = getattr(record, "data", None)  # Celery passes the line's fields as 'data'
        return not (record.msg in self.routine and isinstance(data, dict)
                    and data.get("name") == self.task_name)


@worker_init.connect
def log_thread_deaths(sender: Any = None, **_: Any) -> None:
    """A background thread that dies says so in one log record, its traceback inside it:
    Python's default hook prints to stderr, which a worker redirects to its log one
    write at a time (a traceback became a thousand WARNING lines of one token each)."""
    if isinstance(getattr(sender, "app", None), ReviseCelery):
        threading.excepthook = _log_thread_death


def _log_thread_death(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    name = args.thread.name if args.thread is not None else "?"
    log.error("thread %s died: %s: %s; this worker runs without it until it restarts", name,
              args.exc_type.__name__, args.exc_value, exc_info=args.exc_value)


@worker_init.connect
def refuse_unsafe_sandbox(sender: Any = None, **_: Any) -> None:
    """A worker consuming the sandbox queue starts only with a sandbox it may use: under
    REVISE_SANDBOX=auto that is a ready Docker engine (the process sandbox must be named).
    SystemExit, because Celery logs and ignores an Exception raised by a signal handler."""
    app = getattr(sender, "app", None)
    if not isinstance(app, ReviseCelery):
        return
    if app.routing.queue("sandbox") not in app.amqp.queues.consume_from:
        return
    from broker.errors import SandboxUnavailable
    from sandbox.select import check_sandbox_worker

    try:
        check_sandbox_worker(app.revise_settings)
    except (SandboxUnavailable, SettingsError) as exc:
        raise SystemExit(f"refusing to start a sandbox worker: {exc.message}") from None


def make_app(settings: Settings | None = None, queue: WorkerSettings | None = None
             ) -> ReviseCelery:
    return ReviseCelery(settings or Settings(), queue or WorkerSettings())


def _deployment_app() -> ReviseCelery:
    """The app every role loads (``-A workers.app``): a refused setting stops the role
    with one line naming it, not an import traceback; a variable nothing reads is a warning."""
    try:
        app = make_app()
    except SettingsError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    warn_unknown(os.environ)
    return app


app = _deployment_app()

"""What a worker depends on, checked once when it starts (every role).

A setting the worker can never work with, which the settings alone show, stops it
before it takes a task (``worker_init``), with one ``error:`` line naming the variable
and the fix (``refusals``): a REVISE_HOME that cannot be created or written (every role),
and on a broker worker a provider that is no provider, an HTTP provider without its URL
or key, an artifact store that cannot open. Started anyway, such a worker took every
call and failed it, and the job waiting on it saw a lost task, never the cause.

Whatever may pass is said instead, one log line naming it and the fix (``problems``):
the run store (reachable, schema at head), the ledger's Redis, an HTTP provider set up
but not chosen. Such a worker still starts, degraded, and says so once: the store or
Redis may come back (every task then waits or retries as it always does), and an
operator reads the line in the worker's log, or `revise config --check` before starting.
A sandbox worker without a sandbox refuses to start too (``workers.app``).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery.signals import worker_init, worker_ready
from redis.exceptions import RedisError

from broker.artifact_stores import artifact_store_problem
from broker.errors import ReviseError
from broker.settings import (
    Settings,
    home_problem,
    provider_ignored,
    provider_key_problem,
    provider_problem,
)

log = logging.getLogger("revise.preflight")
_MARK_SECONDS = 7 * 86400  # a stack stopped longer than this is not named
ROLES = {"dispatch": "dispatcher", "sandbox": "sandbox", "capabilities": "broker",
         "reconcile": "reconciler"}  # queue role: the worker's name in the Procfile


def refusals(settings: Settings, roles: set[str]) -> list[str]:
    """What this worker can never work with, from the settings alone (no connection): one
    line each, in the words of `revise config --check`."""
    found = [home_problem(settings)]
    if "capabilities" in roles:
        found += [provider_problem(settings) or provider_key_problem(settings),
                  artifact_store_problem(settings)]
    return [line for line in found if line is not None]


def problems(ctx: Any, roles: set[str]) -> list[str]:
    """One line per thing this worker needs that is not there (it may come back)."""
    found = []
    try:
        ctx.store.list_runs(1)
    except ReviseError as exc:
        found.append(f"run store: {exc.message}")
    try:
        ctx.redis.ping()
    except Exception as exc:  # any client error: Redis is not there
        found.append(f"Redis at {ctx.settings.redis_url.split('@')[-1]} does not answer "
                     f"({type(exc).__name__}); check REVISE_REDIS_URL")
    if "capabilities" in roles and (ignored := provider_ignored(ctx.settings)) is not None:
        found.append(f"provider: {ignored}")
    artifacts = artifact_store_problem(ctx.settings)
    if artifacts is not None:  # a broker worker refused it; another role may not need it
        found.append(f"artifact store: {artifacts}")
    if not found and (shared := prefix_shared(ctx)) is not None:
        found.append(shared)
    return found


def prefix_shared(ctx: Any) -> str | None:
    """Two stacks on one Redis database and queue prefix with different run stores take
    each other's messages: one records the other's jobs in its store, drops its sandbox
    jobs as forged, requeues them as lost. Each worker leaves its run store's mark under
    the prefix as it starts; one that finds another store's says so (once: the mark is
    then its own, so a deployment moved to a new store hears it once)."""
    prefix = ctx.queue.queue_prefix
    try:
        mark = ctx.store.mark()
        if mark is None:
            return None
        mine = json.dumps({"mark": mark, "store": ctx.store.shown_url})
        before = ctx.broker_redis.set(f"revise:{prefix}run-store", mine, ex=_MARK_SECONDS,
                                      get=True)
    except (ReviseError, RedisError):  # away since the lines above: nothing to compare
        return None
    try:
        other = json.loads(before) if before and len(before) <= 4096 else None
        if other is None or other["mark"] == mark:
            return None
        theirs = str(other["store"])[:200]
    except (ValueError, TypeError, KeyError):  # not a mark this code left: an old key
        return None
    named = f"queue prefix {prefix!r}" if prefix else "no queue prefix"
    return (f"workers of another run store ({theirs}) use this Redis database with "
            f"{named}: two stacks on one Redis database and prefix take each other's jobs "
            "(recorded in the wrong store, dropped as forged). Give each stack its own "
            "REVISE_CELERY_QUEUE_PREFIX or Redis database; if this deployment moved to this "
            "run store, this is said once")


def _roles(app: Any) -> set[str]:
    consumed = set(app.amqp.queues.consume_from or {})
    return {role for role in ROLES if app.routing.queue(role) in consumed}


@worker_init.connect
def refuse_on_start(sender: Any = None, **_: Any) -> None:
    """SystemExit, because Celery logs and ignores an Exception raised by a signal
    handler."""
    from workers.app import app

    if getattr(sender, "app", None) is not app:
        return
    roles = _roles(app)
    found = refusals(app.revise_settings, roles)
    if found:
        names = "/".join(ROLES[role] for role in ROLES if role in roles) or "Celery"
        raise SystemExit(f"error: refusing to start a {names} worker: {'; '.join(found)}")


@worker_ready.connect
def check_on_start(sender: Any = None, **_: Any) -> None:
    from workers.app import app

    consumer_app = getattr(sender, "app", None)
    if consumer_app is not app:
        return
    from workers.context import WorkerContext

    ctx = WorkerContext(app.revise_settings, app.queue_settings)  # its own, closed after
    try:
        found = problems(ctx, _roles(app))
    finally:
        if "store" in ctx.__dict__:
            ctx.store.close()
    for line in found:
        log.error("preflight: %s; this worker starts degraded until it is fixed", line)
    if not found:
        log.info("preflight: the run store and Redis answer")

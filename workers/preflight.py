"""What a worker depends on, checked once when it starts (every role).

Each problem is one log line that names it and the fix: the run store (reachable, schema
at head), the ledger's Redis, the provider's configuration (broker role); a sandbox
worker without a sandbox refuses to start (``workers.app``). A worker with a problem
still starts, degraded, and says so once: the store or Redis may come back (every task
then waits or retries as it always does), and an operator reads the line in the
worker's log, or `revise config --check` before starting.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

from broker.artifact_stores import artifact_store_problem
from broker.errors import ReviseError
from broker.settings import provider_ignored, provider_problem

log = logging.getLogger("revise.preflight")


def problems(ctx: Any, roles: set[str]) -> list[str]:
    """One line per thing this worker needs that is not there."""
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
    provider = provider_problem(ctx.settings) or provider_ignored(ctx.settings)
    if "capabilities" in roles and provider is not None:
        found.append(f"provider: {provider}")
    artifacts = artifact_store_problem(ctx.settings)
    if artifacts is not None:
        found.append(f"artifact store: {artifacts}")
    return found


@worker_ready.connect
def check_on_start(sender: Any = None, **_: Any) -> None:
    from workers.app import app

    consumer_app = getattr(sender, "app", None)
    if consumer_app is not app:
        return
    from workers.context import WorkerContext

    consumed = set(app.amqp.queues.consume_from or {})
    roles = {role for role in ("dispatch", "sandbox", "capabilities", "reconcile")
             if app.routing.queue(role) in consumed}
    ctx = WorkerContext(app.revise_settings, app.queue_settings)  # its own, closed after
    try:
        found = problems(ctx, roles)
    finally:
        if "store" in ctx.__dict__:
            ctx.store.close()
    for line in found:
        log.error("preflight: %s; this worker starts degraded until it is fixed", line)
    if not found:
        log.info("preflight: the run store and Redis answer")

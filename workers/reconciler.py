"""The reconciler (``-Q reconcile`` with beat): finds attempts a crash left open.

The sweep is periodic (``REVISE_CELERY_RECONCILE_INTERVAL``), idempotent and
safe with two reconcilers: the store turns a pending attempt unresolved
atomically, so each is reported once. A run with an unresolved attempt is
put in the named state ``blocked: unresolved attempt at <identity>``.
"""

from __future__ import annotations

import logging
from typing import Any

from orchestrator.reconcile import sweep
from workers.app import ReviseTask, app
from workers.routing import SWEEP_TASK

log = logging.getLogger("revise.reconciler")


@app.task(name=SWEEP_TASK, bind=True)
def sweep_attempts(self: ReviseTask) -> dict[str, Any]:
    ctx = self.context
    marked = sweep(ctx.store, ctx.settings.attempt_lease_seconds)
    removed = _remove_stale_containers()
    for attempt in marked:
        log.warning("run %s: attempt #%s at %s is unresolved (owner %s); an operator must "
                    "reconcile it", attempt.run_id, attempt.number, attempt.identity,
                    attempt.owner)
    return {"unresolved": [{"run_id": a.run_id, "identity": str(a.identity),
                            "attempt_id": a.id} for a in marked],
            "containers_removed": removed}


def _remove_stale_containers() -> list[str]:
    """Sandbox containers whose host process died (SIGKILL skips their cleanup)."""
    try:
        import docker

        from sandbox.docker_runner import remove_stale_containers

        return remove_stale_containers(docker.from_env(timeout=10))
    except Exception:  # no engine on this host: nothing of ours can be running
        return []

"""The reconciler (``-Q reconcile`` with beat): finds what a crash or an outage left open.

Each sweep: pending attempts whose owner is gone become unresolved (the run is
``blocked``); submitted jobs whose dispatch message no dispatcher took
(``workers.outbox``) and accepted jobs whose queue message was lost are queued again, and
started jobs whose sandbox worker is gone run again as their next resume
(``workers.recovery``); running revisions whose owner is gone after that are
failed with the reason (``lost: ...``) and their runs are resumable.

The sweep is periodic (``REVISE_CELERY_RECONCILE_INTERVAL``), idempotent and
safe with two reconcilers: the store turns a pending attempt unresolved
atomically, so each is reported once. A run with an unresolved attempt is
put in the named state ``blocked: unresolved attempt at <identity>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from orchestrator.reconcile import resolve_by_lookup, sweep, sweep_revisions
from workers.app import ReviseTask, app
from workers.outbox import resend_lost_dispatches
from workers.parking import wake_all
from workers.recovery import requeue_lost_jobs, resume_lost_jobs
from workers.routing import SWEEP_TASK

log = logging.getLogger("revise.reconciler")


@app.task(name=SWEEP_TASK, bind=True)
def sweep_attempts(self: ReviseTask) -> dict[str, Any]:
    ctx = self.context
    marked = sweep(ctx.store, ctx.settings.attempt_lease_seconds)
    for attempt in marked:
        log.warning("run %s: attempt #%s at %s is unresolved (owner %s); an operator must "
                    "reconcile it", attempt.run_id, attempt.number, attempt.identity,
                    attempt.owner)
    # Each on its own: one that fails (Redis away, or a hostile entry in it) keeps none
    # of the others from running; the revisions are swept in any case (store only).
    dispatches = _step("lost dispatch messages", resend_lost_dispatches, ctx,
                       {"resent": [], "given_up": []})
    jobs = _step("lost job messages", requeue_lost_jobs, ctx, {"requeued": [], "lost": []})
    resumed = _step("jobs whose sandbox worker is gone", resume_lost_jobs, ctx, [])
    resolved = []
    if ctx.settings.provider_lookup_path:  # the provider can be asked: ask, never guess
        resolved = resolve_by_lookup(ctx.store, ctx.provider, ctx.artifacts)
    woken = wake_all(ctx, app)  # a parked job whose broker died was not woken by it
    lost = sweep_revisions(ctx.store, ctx.settings.revision_lease_seconds)
    for revision in lost:
        log.warning("run %s revision %s: %s; the run can be submitted again",
                    revision.run_id, revision.revision, revision.reason)
    removed = _remove_stale_containers()
    return {"unresolved": [{"run_id": a.run_id, "identity": str(a.identity),
                            "attempt_id": a.id} for a in marked],
            "dispatches_resent": dispatches["resent"],
            "requeued": jobs["requeued"], "jobs_lost": jobs["lost"],
            "jobs_resumed": resumed,
            "revisions_lost": [{"run_id": r.run_id, "revision": r.revision,
                                "reason": r.reason} for r in lost],
            "resolved_by_lookup": [{"run_id": d["run_id"], "identity": d["identity"],
                                    "decision": d["decision"]} for d in resolved],
            "parked_woken": woken, "containers_removed": removed}


def _step(what: str, step: Callable[..., Any], ctx: Any, none: Any) -> Any:
    try:
        return step(ctx, app)
    except Exception as exc:
        log.warning("could not look for %s: %s", what, exc)
        return none


def _remove_stale_containers() -> list[str]:
    """Sandbox containers whose host process died (SIGKILL skips their cleanup)."""
    try:
        import docker

        from sandbox.docker_runner import remove_stale_containers

        return remove_stale_containers(docker.from_env(timeout=10))
    except Exception:  # no engine on this host: nothing of ours can be running
        return []

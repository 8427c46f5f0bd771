"""Accepted jobs whose queue message is gone are queued again from the store.

The dispatcher records every job it accepts (``jobs``, with the sandbox
message) before it queues the message. If Redis loses the message (a restart
without persistence, an eviction), or a worker took it and died before starting it
(a prefetched message waits in the transport's unacked set until the visibility
timeout, an hour), the job stays ``accepted`` and no sandbox worker starts it:
after ``requeue_after_seconds`` the reconciler looks in the transport, and a job
whose message is not waiting in the queue is queued again under the same task id.
A live worker starts a delivered job at once (prefetch 1), so one delivered and
still not started is its dead worker's; if that worker was only slow, the job lease
and the revision's start make the second copy a no-op. After ``max_requeues`` the
revision is failed ``lost: job message lost`` and the run is resumable.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from broker.crash_window import lease_expired
from broker.owner import process_owner
from broker.records import JobStatus, RevisionStatus
from orchestrator.reconcile import LOST_MESSAGE, lose_revision
from workers.routing import SANDBOX_TASK, enqueue
from workers.transport import Transport

log = logging.getLogger("revise.recovery")


def sandbox_task_id(job_id: str, resumes: int = 0) -> str:
    """The job's sandbox task; each resume (after parking, or after its sandbox worker
    died) is a task of its own."""
    return f"{job_id}/sandbox" if not resumes else f"{job_id}/sandbox/resume-{resumes}"


def resumes_of(task_id: str, job_id: str) -> int | None:
    """Which start of job ``job_id`` the task ``task_id`` is; None when it is not one of
    the job's sandbox tasks (the store's fence then takes it for a stale delivery)."""
    base = f"{job_id}/sandbox"
    if task_id == base:
        return 0
    number = task_id.removeprefix(f"{base}/resume-")
    if number == task_id or not (number.isascii() and number.isdigit()):
        return None  # str.isdigit alone takes any script's digits, and int() most of them
    # Exactly the id the job's start would have: one id (and one job lease) per start.
    return int(number) if sandbox_task_id(job_id, int(number)) == task_id else None


def requeue_lost_jobs(ctx: Any, app: Any, *, now: datetime | None = None) -> dict[str, list]:
    """One pass: requeue (or, past the limit, fail) accepted jobs whose message is gone."""
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(seconds=ctx.settings.requeue_after_seconds)
    overdue = [j for j in ctx.store.list_jobs(frozenset({JobStatus.ACCEPTED}))
               if j.updated_at < cutoff]
    done: dict[str, list] = {"requeued": [], "lost": []}
    if not overdue:
        return done
    queue = ctx.routing.queue("sandbox")
    transport = Transport(ctx.broker_redis)
    queued = transport.task_ids(queue, delivered=False)
    delivered = transport.task_ids(queue) - queued
    for job in overdue:
        task_id = sandbox_task_id(job.job_id, job.resumes)
        if task_id in queued:
            continue  # still queued behind other jobs: not lost
        if job.requeues >= ctx.settings.max_requeues:
            revision = ctx.store.get_revision(job.run_id, job.revision)
            if revision is not None and revision.status is RevisionStatus.RUNNING and lose_revision(
                    ctx.store, job.run_id, job.revision, LOST_MESSAGE,
                    seen_heartbeat=revision.heartbeat_at):
                done["lost"].append(job.job_id)
            continue
        if not ctx.store.requeued_job(job.job_id, job.requeues):
            continue  # another reconciler counted it first
        enqueue(app, SANDBOX_TASK, queue, task_id=task_id, args=[job.message])
        why = ("was delivered to a worker that never started it (it died holding it)"
               if task_id in delivered else "was lost (Redis restarted or evicted it)")
        ctx.store.add_event(job.run_id, "job_requeued", f"the queue message of job "
                            f"{job.job_id} {why}; queued again ({job.requeues + 1} of "
                            f"{ctx.settings.max_requeues})", revision=job.revision,
                            data={"job_id": job.job_id})
        log.warning("run %s revision %s: job %s had no queue message; queued again",
                    job.run_id, job.revision, job.job_id)
        done["requeued"].append(job.job_id)
    return done


def resume_lost_jobs(ctx: Any, app: Any, *, now: datetime | None = None) -> list[str]:
    """One pass: a started job whose sandbox worker is gone (by the revision lease's rule:
    on this host at once, elsewhere after the lease) runs again as its next resume, like
    a parked job woken: its committed calls replay, calls still in flight at broker
    workers are waited for, nothing is paid twice. Past ``max_requeues`` it is left to
    ``sweep_revisions``, which fails the revision ``lost``. Before that sweep, so a
    killed stack resumes its jobs rather than losing them; a delivery of the old task
    that comes later (the visibility timeout) is stale (``start_revision_txn``)."""
    now = now or datetime.now(UTC)
    lease = ctx.settings.revision_lease_seconds
    resumed = []
    for job in ctx.store.list_jobs(frozenset({JobStatus.STARTED})):
        if job.requeues >= ctx.settings.max_requeues:
            continue
        revision = ctx.store.get_revision(job.run_id, job.revision)
        if revision is None or revision.status is not RevisionStatus.RUNNING or not lease_expired(
                revision.owner, revision.heartbeat_at or revision.created_at, lease, now,
                store_since=ctx.store.available_since):
            continue
        again = ctx.store.resume_lost_job(job, f"the sandbox worker of job {job.job_id} "
                                          f"({revision.owner}) is gone; the job runs again "
                                          f"({job.requeues + 1} of {ctx.settings.max_requeues})"
                                          ": committed calls replay")
        if again is None:
            continue  # started again meanwhile, or another reconciler resumed it
        enqueue(app, SANDBOX_TASK, ctx.routing.queue("sandbox"),
                task_id=sandbox_task_id(again.job_id, again.resumes), args=[again.message])
        log.warning("run %s revision %s: job %s lost its sandbox worker; resumed",
                    job.run_id, job.revision, job.job_id)
        resumed.append(job.job_id)
    return resumed


def count_stale_delivery(ctx: Any, run_id: str, revision: int, what: str) -> int:
    """Count a delivery for a finished revision (acknowledged at once, nothing done): one
    event on the run, naming the worker process it reached, and a counter in Redis
    (``revise:<prefix>stale-deliveries``)."""
    count = 0
    try:
        key = f"revise:{ctx.queue.queue_prefix}stale-deliveries"
        count = int(ctx.redis.incr(key))
    except Exception as exc:  # a counter is not worth failing the acknowledgement
        log.warning("could not count a stale delivery: %s", exc)
    try:
        ctx.store.add_event(run_id, "stale_delivery", f"a {what} for revision {revision}, "
                            "which is no longer running, was acknowledged as a duplicate",
                            revision=revision,
                            data={"what": what, "count": count, "by": process_owner()})
    except Exception as exc:
        log.warning("could not record a stale delivery of run %s: %s", run_id, exc)
    return count

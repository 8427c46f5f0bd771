"""Parked sandbox jobs: woken when the calls they wait for are settled.

A sandbox job whose calls have all been in flight at broker workers for
``park_after_seconds`` gives its sandbox and its process back (``workers.remote``
decides, ``orchestrator.pipeline`` leaves the revision running, the job row says
``parked``). Whoever settles the revision's last pending attempt wakes it: the broker
worker that committed it, the job itself right after it parked (its calls may all
have been settled meanwhile), and the reconciler's sweep (a broker that died leaves
its attempt unresolved, which settles it too). Waking is one conditional update
(``RunStore.wake_parked``), so the job is queued once, as a new sandbox task
(``sandbox_task_id(job, resumes)``); its sandbox runs the admitted script again and
the committed calls replay, in order, for free. If the message is lost, the job is
``accepted`` and the requeue sweep sends it again.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.errors import StoreUnavailable
from broker.records import JobStatus
from workers.recovery import sandbox_task_id
from workers.routing import SANDBOX_TASK

log = logging.getLogger("revise.parking")


def wake(ctx: Any, app: Any, run_id: str, revision: int) -> bool:
    """Queue the revision's parked job again if nothing it waits for is pending."""
    try:
        job = ctx.store.wake_parked(run_id, revision)
    except StoreUnavailable as exc:  # the sweep wakes it when the store answers
        log.warning("could not look for a parked job of run %s: %s", run_id, exc.message)
        return False
    if job is None:
        return False
    try:
        app.send_task(SANDBOX_TASK, task_id=sandbox_task_id(job.job_id, job.resumes),
                      queue=ctx.routing.queue("sandbox"), args=[job.message])
    except Exception as exc:  # Redis is away: the job is accepted, the requeue sweep sends it
        log.warning("run %s revision %s: resuming job %s is not queued yet (%s)", run_id,
                    revision, job.job_id, exc)
    return True


def wake_all(ctx: Any, app: Any) -> int:
    """The sweep's share: every parked job whose calls are all settled."""
    parked = ctx.store.list_jobs(frozenset({JobStatus.PARKED}))
    return sum(wake(ctx, app, job.run_id, job.revision) for job in parked)

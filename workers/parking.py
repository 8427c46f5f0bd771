"""Parked sandbox jobs: woken when the calls they wait for are settled.

A sandbox job whose calls have all been in flight at broker workers gives its
sandbox and its slot back (``ParkRule`` says when, ``workers.remote`` asks it,
``orchestrator.pipeline`` leaves the revision running, the job row says ``parked``):
after ``park_under_load_after_seconds`` if another job waits for a sandbox slot,
after ``park_after_seconds`` whatever. A live sandbox that waits costs a few MB and
a thread; a resume costs a sandbox start and the replay of the calls before it (CPU),
so a job keeps its sandbox through short waits.

Whoever settles the revision's last pending attempt wakes it: the broker
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
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.errors import StoreUnavailable
from broker.records import JobStatus
from workers.recovery import sandbox_task_id
from workers.routing import SANDBOX_TASK, enqueue

log = logging.getLogger("revise.parking")

_LOAD_LOOK_SECONDS = 1.0  # between looks at the sandbox queue once parking could help it


@dataclass(frozen=True)
class ParkRule:
    """When a wave whose calls are all in flight parks its job. ``after``: whatever the
    load (None: never); ``under_load_after``: sooner, while ``slot_wanted()`` (another
    job waits for a sandbox slot)."""

    after: float | None
    under_load_after: float | None = None
    slot_wanted: Callable[[], bool] = lambda: False

    def due(self, sent_at: float) -> bool:
        waited = time.monotonic() - sent_at
        if self.after is not None and waited >= self.after:
            return True
        return self.under_load_after is not None and waited >= self.under_load_after \
            and self._wanted()

    def next_look(self, sent_at: float) -> float | None:
        """Seconds until ``due`` may turn true, or None if it cannot."""
        now = time.monotonic()
        looks = [sent_at + self.after - now] if self.after is not None else []
        if self.under_load_after is not None:
            looks.append(max(sent_at + self.under_load_after - now, _LOAD_LOOK_SECONDS))
        return max(min(looks), 0.1) if looks else None

    def _wanted(self) -> bool:
        try:
            return self.slot_wanted()
        except Exception as exc:  # Redis is away: no load seen, the job keeps its slot
            log.warning("could not see whether jobs wait for a sandbox slot: %s", exc)
            return False


class QueueLoad:
    """Do jobs wait on a queue for a slot? Looked up at most every ``every`` seconds per
    process, however many of its waiting jobs ask."""

    def __init__(self, count: Callable[[], int], every: float = _LOAD_LOOK_SECONDS) -> None:
        self._count = count
        self._every = every
        self._lock = threading.Lock()
        self._seen_at = -every
        self._waiting = False

    def waiting(self) -> bool:
        with self._lock:
            if time.monotonic() - self._seen_at >= self._every:
                self._seen_at = time.monotonic()
                self._waiting = self._count() > 0
            return self._waiting


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
        enqueue(app, SANDBOX_TASK, ctx.routing.queue("sandbox"),
                task_id=sandbox_task_id(job.job_id, job.resumes), args=[job.message])
    except Exception as exc:  # Redis is away: the job is accepted, the requeue sweep sends it
        log.warning("run %s revision %s: resuming job %s is not queued yet (%s)", run_id,
                    revision, job.job_id, exc)
    return True


def wake_all(ctx: Any, app: Any) -> int:
    """The sweep's share: every parked job whose calls are all settled."""
    parked = ctx.store.list_jobs(frozenset({JobStatus.PARKED}))
    return sum(wake(ctx, app, job.run_id, job.revision) for job in parked)

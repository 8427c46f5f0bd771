"""Parked sandbox jobs: woken when the calls they wait for are settled.

A sandbox job whose calls have all been in flight at broker workers gives its
sandbox and its slot back (``ParkRule`` says when, ``workers.remote`` asks it,
``orchestrator.pipeline`` leaves the revision running, the job row says ``parked``):
after ``park_under_load_after_seconds`` to give its slot to a job that waits for one
(as many parks as there are such jobs), after ``park_after_seconds`` whatever. A live
sandbox that waits costs a few MB and a thread; a resume costs a sandbox start and the
replay of the calls before it (CPU), so a job keeps its sandbox through short waits.

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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from broker.errors import StoreUnavailable
from broker.records import JobStatus
from workers.recovery import sandbox_task_id
from workers.routing import SANDBOX_TASK, enqueue

log = logging.getLogger("revise.parking")

_LOAD_LOOK_SECONDS = 1.0  # between looks at the sandbox queue once parking could help it


class SlotDemand(Protocol):
    """Jobs that wait for a sandbox slot, as a waiting job's park rule sees them."""

    def waiting(self) -> bool:
        """Does a job wait for a slot that no park has given it yet?"""

    def give(self) -> bool:
        """One park gives its slot to one waiting job: False if none is left to give to."""


class _NoDemand:
    def waiting(self) -> bool:
        return False

    def give(self) -> bool:
        return False


@dataclass(frozen=True)
class ParkRule:
    """When a wave whose calls are all in flight parks its job. ``after``: whatever the
    load (None: never); ``under_load_after``: sooner, to give its slot to a job that
    waits for one (``demand``): one park for each such job, so a short queue does not
    park every waiting job (each park costs a resume: a sandbox start and a replay)."""

    after: float | None
    under_load_after: float | None = None
    demand: SlotDemand = field(default_factory=_NoDemand)

    def due(self, since: float) -> bool:
        """Could the wave park now? (Takes nothing: ``park`` decides.)"""
        return self._long(since) or (self._loaded(since) and self._ask(self.demand.waiting))

    def park(self, since: float) -> bool:
        """Does the wave park now? A park for load gives its slot to one waiting job."""
        return self._long(since) or (self._loaded(since) and self._ask(self.demand.give))

    def next_look(self, sent_at: float) -> float | None:
        """Seconds until ``due`` may turn true, or None if it cannot."""
        now = time.monotonic()
        looks = [sent_at + self.after - now] if self.after is not None else []
        if self.under_load_after is not None:
            looks.append(max(sent_at + self.under_load_after - now, _LOAD_LOOK_SECONDS))
        return max(min(looks), 0.1) if looks else None

    def _long(self, since: float) -> bool:
        return self.after is not None and time.monotonic() - since >= self.after

    def _loaded(self, since: float) -> bool:
        return self.under_load_after is not None and \
            time.monotonic() - since >= self.under_load_after

    @staticmethod
    def _ask(question: Callable[[], bool]) -> bool:
        try:
            return question()
        except Exception as exc:  # Redis is away: no load seen, the job keeps its slot
            log.warning("could not see whether jobs wait for a sandbox slot: %s", exc)
            return False


class QueueLoad:
    """The jobs that wait on a queue for a slot, as one process's parks see them: the
    queue is looked up at most every ``every`` seconds however many waiting jobs ask,
    less the slots this process's parks gave lately (a freed slot takes a moment to
    take its message, so a look right after a park may still count the job it serves)."""

    def __init__(self, count: Callable[[], int], every: float = _LOAD_LOOK_SECONDS) -> None:
        self._count = count
        self._every = every
        self._lock = threading.Lock()
        self._seen_at = -every
        self._left = 0  # waiting jobs no park of this process has given a slot yet
        self._given: deque[float] = deque()  # when this process's parks gave a slot

    def waiting(self) -> bool:
        with self._lock:
            return self._look() > 0

    def give(self) -> bool:
        with self._lock:
            if self._look() <= 0:
                return False
            self._left -= 1
            self._given.append(time.monotonic())
            return True

    def _look(self) -> int:
        now = time.monotonic()
        if now - self._seen_at >= self._every:
            self._seen_at = now
            while self._given and now - self._given[0] > 2 * self._every:
                self._given.popleft()
            self._left = self._count() - len(self._given)
        return self._left


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

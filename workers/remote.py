"""The executor a sandbox worker's revision uses: it decides and claims the new calls
of a wave itself, and broker workers execute them.

Replays and divergences are decided on the sandbox worker from the prefix it loaded
(``orchestrator.session``); the wave's new calls are claimed here, in one store
transaction (``broker.claim``: replay, divergence, repeat, budget, attempts). Only the
claimed attempts' ids travel, at most ``chunk`` per capability task
(``REVISE_CELERY_WAVE_CHUNK``, so a wide fanout spreads over broker workers); a broker
worker reads each attempt and its payload from the store and executes it. The answer
comes back one way, through the store: the broker rings this process's doorbell
(``workers.doorbell``) when it settled a call and the wait reads the settled attempts.

Until a broker takes a claimed attempt (its dispatch record) the attempt is this
job's: its heartbeat is renewed here. If the revision parks, or stops for a reason
outside its calls (``Session.latch``), before a broker takes them, the attempts nobody
took are withdrawn (nothing was sent, nothing is paid). Why waiting here cannot
deadlock: the sandbox worker waits only on tasks of the ``capabilities`` queue, which
sandbox workers never consume; broker workers never wait on anything queued.

The store is read when the doorbell rings, and every ``_RING_POLL_SECONDS`` (within
half a lease) while the doorbell listens (a ring can then be lost only when its
publish failed; the doorbell rings every waiter when it starts or stops listening);
every ``_POLL_SECONDS`` while it does not listen, or once a call not seen taken has
waited half a lease (whether its task was lost is decided from it). A wave that may
park reads whether its calls were taken when the park would be due.

The wait is bounded by what the store and the transport say, not by a constant: an
attempt whose owner died stops the call fail-closed (``AttemptUnresolved``), a read-
only one is claimed and sent again (a few times); a task whose attempts nobody took
within a lease, and whose message is neither queued nor delivered, was lost (a Redis
restart): it is sent once more; calls still queued while no broker worker has beaten
(``workers.roster``) for a whole lease stop fail-closed. ``capability_wait_seconds``
stays the outer bound.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from celery import Celery

from broker.calls import (
    CallReport,
    CallRequest,
    ClaimedCall,
    ClaimedWave,
    Outcome,
    failed_report,
    stop_report,
)
from broker.catalog import lookup
from broker.claim import READ_ONLY_RETRIES, Claimer
from broker.crash_window import attempt_expired, mark_unresolved
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    Parked,
    ReplayDivergence,
    SafetyStop,
    SlotConflict,
    StoreUnavailable,
)
from broker.heartbeats import AttemptHeartbeats
from broker.models import utcnow
from broker.outage import is_queue_outage, queue_unavailable
from broker.records import (
    COMMITTED_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    SlotRecord,
)
from broker.store import RunStore
from workers.doorbell import Doorbell
from workers.messages import WAVE_CALLS
from workers.parking import ParkRule
from workers.roster import Roster
from workers.routing import CAPABILITY_TASK, Routing, enqueue
from workers.transport import Transport

log = logging.getLogger("revise.remote")

_POLL_SECONDS = 2.0  # between looks at the store while a call is untaken or no doorbell listens
_RING_POLL_SECONDS = 10.0  # between looks while every call is taken and the doorbell listens
_TAKEN_WITHIN = 1.0  # a call still queued after this long makes the wait look for brokers
_PARK_LOOK = 0.5  # between looks at the store while a wave that may park waits for a taker
_RESENDS = 1  # a lost capability task is sent again this many times


@dataclass
class _Waiting:
    """One claimed call of a wave: its request, its attempt, when its task was sent and
    when this process first saw a broker worker take it."""

    request: CallRequest
    attempt: AttemptRecord
    sent_at: float
    task_id: str
    resends: int = 0
    retries: int = 0  # a read-only call claimed again after its broker died
    taken_at: float | None = None


def _sent(waiting: dict[int, _Waiting]) -> float:
    """When the wave's first task was sent."""
    return min(w.sent_at for w in waiting.values())


def _taken(waiting: dict[int, _Waiting]) -> float | None:
    """Since when the wave's calls are in flight at broker workers, as this process saw
    it: what a wave parks on, so a call that queued for a busy broker does not count its
    queueing as a long wait (None: a call is not taken yet)."""
    taken = [w.taken_at for w in waiting.values()]
    return None if None in taken else min(t for t in taken if t is not None)


def _taken_at(one: _Waiting, sent_at: datetime) -> float:
    """This process's monotonic time for the take the store recorded at ``sent_at`` (the
    broker's clock: a skew between hosts moves only when a wave may park), never before
    the call's task was sent."""
    ago = max(0.0, (utcnow() - sent_at).total_seconds())
    return max(one.sent_at, time.monotonic() - ago)


def capability_task_id(job_id: str, attempt_ids: Sequence[int]) -> str:
    return f"{job_id}/calls/{attempt_ids[0]}+{len(attempt_ids) - 1}"


def wave_summary(run_id: str, revision: int, requests: Sequence[CallRequest]) -> str:
    """What Flower shows as a capability task's arguments: the run and its calls."""
    shown = ", ".join(f"{r.capability} at {r.identity}" for r in requests[:4])
    more = f" and {len(requests) - 4} more" if len(requests) > 4 else ""
    count = "1 call" if len(requests) == 1 else f"{len(requests)} calls"
    return f"run {run_id} revision {revision}, {count}: {shown}{more}"


class RemoteExecutor:
    def __init__(self, *, app: Celery, routing: Routing, claimer: Claimer, job_id: str,
                 run_id: str, revision: int, store: RunStore, heartbeats: AttemptHeartbeats,
                 doorbell: Doorbell, wait_seconds: float, transport: Transport | None = None,
                 brokers: Roster | None = None, lease_seconds: float = 30.0,
                 chunk: int = 16, park: ParkRule | None = None) -> None:
        """``claimer`` claims in this job's name (its ``owner``). ``park``: once every
        call the revision waits for is in flight at a broker worker and the rule says so,
        the waits answer ``Parked``: the job gives its sandbox back and resumes when the
        calls are settled (``workers.parking``)."""
        self.app = app
        self.routing = routing
        self.claimer = claimer
        self.job_id = job_id
        self.run_id = run_id
        self.revision = revision
        self.store = store
        self.heartbeats = heartbeats
        self.doorbell = doorbell
        self.wait_seconds = wait_seconds
        self.transport = transport
        self.brokers = brokers
        self.lease_seconds = lease_seconds
        self.chunk = max(1, min(chunk, WAVE_CALLS))
        self.park = park or ParkRule(after=None)
        self._parking = threading.Event()
        self._stopped = threading.Event()
        self._unsettled: set[int] = set()  # claimed here, not yet seen settled

    def close(self) -> None:
        if self._unsettled:  # else every claimed call was seen settled: none is unsent
            self.withdraw("the revision ended")

    def stop(self, why: str, *, withdraw: bool) -> None:
        """The revision stopped: it parks no more (its waves wait for the calls they
        sent); with ``withdraw``, every claimed call no broker took yet is taken back."""
        self._stopped.set()
        if withdraw:
            self.withdraw(why)

    def withdraw(self, why: str) -> None:
        """Take back every claimed call no broker took yet: nothing of them was sent."""
        try:
            self.store.withdraw_unsent(self.run_id, self.revision, self.claimer.owner,
                                       f"withdrawn before its request left: {why}")
        except StoreUnavailable as exc:  # its owner is alive: a broker may still take it
            log.warning("run %s: could not withdraw unsent calls: %s", self.run_id,
                        exc.message)

    def claim_wave(self, requests: Sequence[CallRequest]) -> ClaimedWave:
        """Claim the wave; its claimed calls are this job's from now on (their heartbeat
        is renewed here until they settle), also while the wave waits for a thread."""
        wave = self.claimer.claim_wave(requests)
        ids = [call.attempt.id for _, call in wave.claimed]
        if ids:
            self._unsettled.update(ids)
            self.heartbeats.add(*ids)
        return wave

    def run_wave(self, wave: ClaimedWave) -> Iterator[CallReport]:
        """Send what was claimed and yield each call's report as it is settled (or a
        single stop report)."""
        if wave.claimed:
            yield from self._execute({call.attempt.id: (request, call)
                                      for request, call in wave.claimed})

    def _execute(self, claimed: dict[int, tuple[CallRequest, ClaimedCall]]
                 ) -> Iterator[CallReport]:
        held: set[int] = set(claimed)
        with self.doorbell.waiting(self.run_id, self.revision) as rang:
            try:
                waiting = self._send_all(claimed)
            except Exception as exc:
                if not is_queue_outage(exc):
                    raise
                self.withdraw("the capability queue is unavailable")
                request = next(iter(claimed.values()))[0]
                stop = queue_unavailable(str(self.app.conf.broker_url),
                                         f"sending the call at {request.identity}", exc,
                                         identity=str(request.identity))
                yield stop_report(request.identity, request.capability, stop)
                self.heartbeats.discard(*held)
                return
            try:
                yield from self._wait(waiting, rang, held)
            finally:
                self.heartbeats.discard(*held)

    def _send_all(self, claimed: dict[int, tuple[CallRequest, ClaimedCall]]
                  ) -> dict[int, _Waiting]:
        ids = list(claimed)
        waiting: dict[int, _Waiting] = {}
        for start in range(0, len(ids), self.chunk):
            part = ids[start:start + self.chunk]
            task_id = self._send(part, [claimed[i][0] for i in part])
            now = time.monotonic()
            for attempt_id in part:
                request, call = claimed[attempt_id]
                waiting[attempt_id] = _Waiting(request, call.attempt, now, task_id)
        return waiting

    def _send(self, attempt_ids: Sequence[int], requests: Sequence[CallRequest]) -> str:
        task_id = capability_task_id(self.job_id, attempt_ids)
        enqueue(self.app, CAPABILITY_TASK, self.routing.queue("capabilities"),
                args=[{"run_id": self.run_id, "revision": self.revision,
                       "attempts": list(attempt_ids), "doorbell": self.doorbell.channel}],
                task_id=task_id, argsrepr=wave_summary(self.run_id, self.revision, requests))
        return task_id

    # ---- waiting: the store is the answer, the doorbell says when to look ------------------

    def _wait(self, waiting: dict[int, _Waiting], rang: threading.Event, held: set[int]
              ) -> Iterator[CallReport]:
        """``held``: the attempts whose heartbeat this job renews (it grows when a call
        is claimed again)."""
        deadline = time.monotonic() + self.wait_seconds
        nobody_since: float | None = None
        looked = time.monotonic()  # the calls were just claimed: nothing is settled yet
        while waiting:
            since = time.monotonic() - looked
            # Besides the doorbell and the poll period, a wave that may park needs to know
            # whether its calls were taken (only calls in flight at a broker may park).
            unsure = _taken(waiting) is None
            if rang.is_set() or since >= self._period(waiting) or (
                    unsure and since >= _PARK_LOOK and self._may_park(_sent(waiting))):
                rang.clear()
                looked = time.monotonic()
                for report in self._look(waiting, held):
                    yield report
                    if report.stop is not None:
                        return
            if not waiting:
                return
            stop = self._stalled(waiting, deadline)
            if stop is not None:
                yield stop
                return
            untaken = [w for w in waiting.values() if w.taken_at is None
                       and time.monotonic() - w.sent_at > _TAKEN_WITHIN]
            if untaken:
                nobody_since = self._brokers(nobody_since)
                if nobody_since is not None and \
                        time.monotonic() - nobody_since > self.lease_seconds:
                    yield self._no_answer(untaken[0], f"no live broker worker for "
                                          f"{self.lease_seconds:.0f} s")
                    return
                lost = self._resend_lost(untaken)
                if lost is not None:
                    yield lost
                    return
            taken = _taken(waiting)
            rang.wait(max(0.0, min(looked + self._period(waiting), deadline,
                                   self._next_park_look(waiting, taken)) - time.monotonic()))

    def _look(self, waiting: dict[int, _Waiting], held: set[int]) -> Iterator[CallReport]:
        """The reports of the calls the store says are settled (none while it is away)."""
        try:
            settled = self.store.settled(self.run_id, list(waiting))
        except StoreUnavailable:
            return  # the store is away: its answer decides when it is back
        for attempt, slot in settled:
            report = self._settled(waiting, attempt, slot, held)
            if report is not None:
                del waiting[attempt.id]
                self._unsettled.discard(attempt.id)
                yield report
                if report.stop is not None:
                    return

    def _settled(self, waiting: dict[int, _Waiting], attempt: AttemptRecord,
                 slot: SlotRecord | None, held: set[int]) -> CallReport | None:
        """The call's report once its attempt is settled (None while it is not)."""
        one = waiting[attempt.id]
        one.attempt = attempt
        if attempt.sent_at is not None and one.taken_at is None:
            one.taken_at = _taken_at(one, attempt.sent_at)
        request = one.request
        status = attempt.status
        if status in COMMITTED_ATTEMPT_STATUSES and slot is not None:
            return CallReport(request.identity, request.capability, Outcome.EXECUTED,
                              result=slot.result, attempted=True, cost=slot.cost,
                              committed_by=slot.revision)
        if status in (AttemptStatus.FAILED, AttemptStatus.UNCERTAIN):
            error = attempt.error or {}
            if error.get("code") == SlotConflict.code:
                stop = ReplayDivergence(str(error.get("message")), identity=str(request.identity))
                return stop_report(request.identity, request.capability, stop)
            return failed_report(request.identity, request.capability, error,
                                 lookup(request.capability).unit_price)
        if status is AttemptStatus.PENDING and attempt.sent_at is not None and \
                attempt_expired(attempt, self.lease_seconds,
                                store_since=self.store.available_since):
            marked = mark_unresolved(self.store, attempt, by="sandbox worker",
                                     reason="its owner is gone or its lease expired")
            status = AttemptStatus.UNRESOLVED if marked is not None else status
        if status is AttemptStatus.UNRESOLVED:
            return self._unresolved(waiting, one, held)
        if status is AttemptStatus.ABANDONED:
            stop = AttemptInFlight(
                f"the call at {request.identity} was taken back before its request left "
                f"({attempt.error or 'its claim was withdrawn'}); nothing was sent. Submit "
                "the run again: the call runs once", identity=str(request.identity),
                attempt_id=attempt.id)
            return stop_report(request.identity, request.capability, stop)
        return None

    def _unresolved(self, waiting: dict[int, _Waiting], one: _Waiting, held: set[int]
                    ) -> CallReport | None:
        """Its broker died after sending: a side-effecting call stops (an operator
        decides); a read-only one is claimed and sent again, a few times."""
        request, attempt = one.request, one.attempt
        if not lookup(request.capability).side_effecting and one.retries < READ_ONLY_RETRIES:
            try:
                decided = self.claimer.claim([request])[0]
            except SafetyStop as stop:
                return stop_report(request.identity, request.capability, stop)
            if decided.report is not None:
                return decided.report
            assert decided.claimed is not None
            again = decided.claimed.attempt
            held.add(again.id)
            self.heartbeats.add(again.id)
            del waiting[attempt.id]
            self._unsettled.discard(attempt.id)
            self._unsettled.add(again.id)
            waiting[again.id] = _Waiting(request, again, time.monotonic(),
                                         self._send([again.id], [request]),
                                         retries=one.retries + 1)
            return None
        stop = AttemptUnresolved(
            f"{request.identity} has an unresolved attempt (#{attempt.number}, owner "
            f"{attempt.owner}): its broker worker is gone and the provider may or may "
            f"not have completed it. Resolve it with `revise reconcile {request.run_id} "
            f"'{request.identity}' --from-log FILE`, `--result FILE` or `--abandon`",
            identity=str(request.identity), attempt_id=attempt.id)
        return stop_report(request.identity, request.capability, stop)

    def _stalled(self, waiting: dict[int, _Waiting], deadline: float) -> CallReport | None:
        """A stop for the wave when it parks (every call it waits for is in flight at a
        broker worker and the park rule says so, or another wave of the job parked) or
        when its time is up; None while it waits on."""
        first = next(iter(waiting.values()))
        taken = _taken(waiting)
        if taken is not None and self._parkable() and self.park.park(taken):
            self._parking.set()  # every other wave still waiting parks with it
        if self._parking.is_set():
            self.withdraw("the job parked")  # claimed again when it resumes
            stop = Parked(f"the calls from {first.request.identity} on are in flight at "
                          "broker workers; the job parks until they are settled",
                          identity=str(first.request.identity))
            return stop_report(first.request.identity, first.request.capability, stop)
        if time.monotonic() >= deadline:
            return self._no_answer(first, f"no answer within {self.wait_seconds:.0f} s")
        return None

    def _may_park(self, since: float) -> bool:
        """Could a wave waiting since ``since`` park now?"""
        return self._parkable() and self.park.due(since)

    def _parkable(self) -> bool:
        """Neither parking already nor stopped."""
        return not (self._parking.is_set() or self._stopped.is_set())

    def _brokers(self, nobody_since: float | None) -> float | None:
        """Since when no broker worker is alive to take a queued call (None: one is)."""
        if self.brokers is None:
            return None
        try:
            alive = self.brokers.alive(self.lease_seconds) > 0
        except Exception:  # Redis is away: no verdict on the brokers either
            alive = True
        if alive:
            return None
        return time.monotonic() if nobody_since is None else nobody_since

    def _resend_lost(self, untaken: list[_Waiting]) -> CallReport | None:
        """Tasks whose calls nobody took within a lease and whose message the transport
        no longer holds were lost (a Redis restart): sent once more (a copy that was only
        slow takes nothing twice: taking an attempt is atomic)."""
        now = time.monotonic()
        overdue = {w.task_id for w in untaken if now - w.sent_at > self.lease_seconds}
        if not overdue or self.transport is None:
            return None
        try:
            held = self.transport.task_ids(self.routing.queue("capabilities"))
        except Exception as exc:  # Redis is away: the message may come back with it
            log.warning("cannot look for the tasks of run %s: %s", self.run_id, exc)
            return None
        for task_id in overdue - held:
            group = [w for w in untaken if w.task_id == task_id]
            if group[0].resends >= _RESENDS:
                return self._no_answer(group[0], "no broker worker took the call (its task "
                                       "message was lost twice)")
            log.warning("the capability task %s was lost; sending it again", task_id)
            self._send([w.attempt.id for w in group], [w.request for w in group])
            for one in group:
                one.sent_at, one.resends = now, one.resends + 1
        return None

    def _period(self, waiting: dict[int, _Waiting]) -> float:
        """Between looks at the store without a ring: short while no doorbell listens, or
        once a call not seen taken has waited half a lease (whether its task was lost is
        decided from the look); else long, but within half a lease (an attempt whose
        broker died is seen soon after its lease expired). Whether a call was taken is
        otherwise learnt from the look a ring brings (or the one a park may need):
        looking sooner cost a read per call, the answer's read coming anyway."""
        now = time.monotonic()
        if not self.doorbell.listening or any(
                w.taken_at is None and now - w.sent_at > self.lease_seconds / 2
                for w in waiting.values()):
            return _POLL_SECONDS
        return max(_POLL_SECONDS, min(_RING_POLL_SECONDS, self.lease_seconds / 2))

    def _next_park_look(self, waiting: dict[int, _Waiting], taken: float | None) -> float:
        """When the wave may park next (monotonic time; infinity: it cannot); ``taken``:
        ``_taken(waiting)``."""
        look = self.park.next_look(_sent(waiting) if taken is None else taken)
        return float("inf") if look is None else time.monotonic() + look

    def _no_answer(self, one: _Waiting, why: str) -> CallReport:
        request = one.request
        stop = AttemptInFlight(
            f"the capability queue gave {why} for {request.identity}; the call may still "
            f"complete and commit. Check that broker workers "
            f"(-Q {self.routing.queue('capabilities')}) are running, "
            "then submit again: a committed call replays", identity=str(request.identity))
        return stop_report(request.identity, request.capability, stop)

"""The executor a sandbox worker's revision uses: the new calls of a wave become
capability tasks.

Only new work travels: replays and divergences are decided on the sandbox
worker from the prefix it loaded (``orchestrator.session``). ``RemoteExecutor``
sends the wave's new calls (``CallRequest.to_wire()``, at most ``chunk`` per task,
``REVISE_CELERY_WAVE_CHUNK``, so a wide fanout spreads over broker workers) to the ``capabilities``
queue and yields each task's ``CallReport``s as it answers. The broker worker
claims a task's calls in one transaction (``broker.dispatch``). Celery moves
waves only: fanout, joins and ordering stay in the sandbox runtime and the run
store (no chords or groups, whose joins and error callbacks we cannot make
exactly-once).

The task id is derived from (job, identities), so a redelivered sandbox job that
asks for the same calls again gets the same task, whose stored answer is
returned without another provider call (see ``workers.capability``).

Why waiting here cannot deadlock: the sandbox worker waits only on tasks of the
``capabilities`` queue, which sandbox workers never consume (``-Q sandbox``);
those tasks run in separate broker worker processes that never wait on
anything queued.

The wait is bounded by what the store and the transport say, not by a constant:
while no answer comes, the calls' attempts are watched. Committed slots for all
of them are the answer (the result backend may have lost it); an attempt whose owner died or
whose lease expired stops the call fail-closed (``AttemptUnresolved``) at once;
a task whose message is neither queued nor delivered and that never claimed an
attempt within a lease period was lost (a Redis restart): it is sent once more
under the same id, then given up; a task still queued while no broker worker
has beaten (``workers.roster``) for a whole lease stops fail-closed.
``capability_wait_seconds`` stays the outer bound. A result backend that does not
answer is waited out like a slow task.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout

from broker.calls import CallReport, CallRequest, Outcome
from broker.catalog import lookup
from broker.crash_window import attempt_expired, mark_unresolved
from broker.dispatch import budget_check
from broker.envelope import Envelope
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    BrokerError,
    BudgetExceeded,
    Parked,
    StoreUnavailable,
)
from broker.identity import sha256_hex
from broker.outage import is_queue_outage, queue_unavailable
from broker.records import AttemptRecord, AttemptStatus, SlotRecord
from broker.store import RunStore
from workers.messages import WAVE_CALLS
from workers.outcome import answer_of
from workers.parking import ParkRule
from workers.roster import Roster
from workers.routing import CAPABILITY_TASK, Routing
from workers.transport import Transport

log = logging.getLogger("revise.remote")

_POLL_SECONDS = 2.0  # between looks at the store while no answer comes
_RESENDS = 1  # a lost capability task is sent again this many times


def capability_task_id(job_id: str, requests: Sequence[CallRequest]) -> str:
    """Derived from the job and the calls, so a redelivered job asking for the same calls
    gets the same task (and its stored answer), and never another wave's answer."""
    if len(requests) == 1:
        return f"{job_id}/call/{requests[0].identity}"
    names = sha256_hex("\n".join(str(r.identity) for r in requests).encode())[:16]
    return f"{job_id}/wave/{requests[0].identity}+{len(requests) - 1}/{names}"


def wave_summary(requests: Sequence[CallRequest]) -> str:
    """What Flower shows as a capability task's arguments: the run and its calls, not a
    truncated repr of every payload (building that repr was a tenth of a send)."""
    first = requests[0]
    shown = ", ".join(f"{r.capability} at {r.identity}" for r in requests[:4])
    more = f" and {len(requests) - 4} more" if len(requests) > 4 else ""
    count = "1 call" if len(requests) == 1 else f"{len(requests)} calls"
    return f"run {first.run_id} revision {first.revision}, {count}: {shown}{more}"


class RemoteExecutor:
    def __init__(self, *, app: Celery, routing: Routing, envelope: Envelope, job_id: str,
                 wait_seconds: float, delivery: int = 1, store: RunStore | None = None,
                 transport: Transport | None = None, brokers: Roster | None = None,
                 lease_seconds: float = 30.0, chunk: int = 16,
                 park: ParkRule | None = None) -> None:
        """``store`` and ``transport`` bound each wait by the calls' liveness (without
        them only ``wait_seconds`` does). ``park``: once every call of a wave is in flight
        at a broker worker and the rule says so, the wave answers ``Parked`` (and so does
        every other wave still waiting): the revision's job gives its sandbox back and
        resumes when the calls are settled (``workers.parking``)."""
        self.app = app
        self.routing = routing
        self.job_id = job_id
        self.wait_seconds = wait_seconds
        self.delivery = delivery
        self.store = store
        self.transport = transport
        self.brokers = brokers
        self.lease_seconds = lease_seconds
        self.chunk = max(1, min(chunk, WAVE_CALLS))
        self.park = park or ParkRule(after=None)
        self._parking = threading.Event()
        self._envelope_wire = envelope.model_dump(mode="json")
        self._budget = budget_check(envelope.budget)

    def close(self) -> None:
        """Nothing to release: each wave's tasks were waited for."""

    def execute_wave(self, requests: Sequence[CallRequest]) -> Iterator[CallReport]:
        """The wave's calls as capability tasks of at most ``chunk`` calls each, answered
        as each task answers."""
        chunks = [list(requests[i:i + self.chunk]) for i in range(0, len(requests), self.chunk)]
        if len(chunks) == 1:
            yield from self._execute(chunks[0])
            return
        stop = self._over_budget(requests)
        if stop is not None:
            yield stop
            return
        with ThreadPoolExecutor(len(chunks), thread_name_prefix="revise-wave") as pool:
            futures = [pool.submit(self._execute, chunk) for chunk in chunks]
            for future in as_completed(futures):
                yield from future.result()

    def _over_budget(self, requests: Sequence[CallRequest]) -> CallReport | None:
        """A wave split over several tasks is held to the budget whole, as one claim
        transaction holds a wave embedded: each task's claim would see only its part, so
        a wave that does not fit stops here and none of it is sent. The calls of the wave
        that already have an attempt in this revision (a redelivered job) are counted
        once. Each task's claim still checks again under the run's lock."""
        if self._budget is None or self.store is None:
            return None
        first = requests[0]
        attempts = self.store.list_attempts(first.run_id)
        attempted = {a.identity for a in attempts if a.revision == first.revision}
        calls = len(attempts)
        cost = sum(lookup(a.capability).unit_price for a in attempts)
        for request in requests:
            if request.identity in attempted:
                continue
            refusal = self._budget(request.capability, calls, cost)
            if refusal is not None:
                where = str(request.identity)
                stop = BudgetExceeded(f"call at {where}: {refusal}; the wave of "
                                      f"{len(requests)} calls is stopped whole, none sent",
                                      identity=where)
                return CallReport(request.identity, request.capability, Outcome.DENIED,
                                  stop=stop, error=stop.to_json())
            calls, cost = calls + 1, cost + lookup(request.capability).unit_price
        return None

    def _send(self, requests: list[CallRequest]) -> Any:
        return self.app.send_task(
            CAPABILITY_TASK, args=[[r.to_wire() for r in requests], self._envelope_wire,
                                   self.delivery],
            task_id=capability_task_id(self.job_id, requests),
            queue=self.routing.queue("capabilities"), argsrepr=wave_summary(requests))

    def _execute(self, requests: list[CallRequest]) -> list[CallReport]:
        try:
            sent = self._send(requests)
        except Exception as exc:
            if not is_queue_outage(exc):
                raise
            return [self._outage(requests[0], f"sending the call at {requests[0].identity}",
                                 exc)]
        return self._wait(requests, sent)

    def _wait(self, requests: list[CallRequest], result: Any) -> list[CallReport]:
        first = requests[0]
        deadline = time.monotonic() + self.wait_seconds
        sent_at, resends = time.monotonic(), 0
        nobody_since: float | None = None
        while True:
            if self._parking.is_set():
                return [self._parked(first)]
            left = deadline - time.monotonic()
            if left <= 0:
                return [self._no_answer(first, f"no answer within {self.wait_seconds:.0f} s")]
            try:
                answer: Any = result.get(timeout=self._poll(left, sent_at), propagate=False,
                                         disable_sync_subtasks=False)
            except CeleryTimeout:
                pass
            except Exception as exc:  # the result backend (Redis) does not answer
                log.warning("waiting for %s: the result backend failed (%s)", first.identity,
                            exc)
                time.sleep(min(_POLL_SECONDS, max(left, 0)))
            else:
                carried = answer_of(answer) if result.failed() else answer
                if not isinstance(carried, dict):  # not a wave answer: a crashed task
                    raise BrokerError(f"capability task for {first.identity} failed: "
                                      f"{answer!r}", identity=str(first.identity))
                return [CallReport.from_wire(wire) for wire in carried.get("reports") or []]
            found = self._watch(requests, sent_at)
            if isinstance(found, list):
                return found
            if found == "in_flight" and self.park.due(sent_at):
                self._parking.set()  # every other wave still waiting parks with it
                return [self._parked(first)]
            if found == "queued":  # still queued: is any broker worker alive to take it?
                if self._brokers_alive():
                    nobody_since = None
                elif nobody_since is None:
                    nobody_since = time.monotonic()
                elif time.monotonic() - nobody_since > self.lease_seconds:
                    return [self._no_answer(first, "no live broker worker for "
                                            f"{self.lease_seconds:.0f} s")]
            if found == "lost":
                if resends >= _RESENDS:
                    return [self._no_answer(first, "no broker worker took the call (its "
                                            "task message was lost twice)")]
                log.warning("the capability task for %s was lost; sending it again",
                            first.identity)
                result, sent_at, resends = self._send(requests), time.monotonic(), resends + 1

    def _watch(self, requests: list[CallRequest], sent_at: float
               ) -> list[CallReport] | str | None:
        """What the store says about calls that have not answered yet: their reports (all
        committed, or one stopped), "in_flight" (every call's attempt of this revision is
        open at a broker worker), "queued" or "lost" (no attempt after a lease), or None
        (still on their way)."""
        if self.store is None:
            return None
        reports: list[CallReport] = []
        attempted = False
        in_flight = True
        try:
            for request in requests:
                report, attempt = self._watch_one(request)
                if report is not None and report.stop is not None:
                    return [report]
                attempted = attempted or attempt is not None
                in_flight = in_flight and report is None and \
                    isinstance(attempt, AttemptRecord) and \
                    attempt.revision == request.revision and \
                    attempt.status is AttemptStatus.PENDING
                if report is not None:
                    reports.append(report)
        except StoreUnavailable:
            return None  # the store is away: its answer decides when it is back
        if len(reports) == len(requests):
            return reports  # every call committed: the result backend lost the answer
        if in_flight:
            return "in_flight"
        if attempted or self.transport is None \
                or time.monotonic() - sent_at <= self.lease_seconds:
            return None
        task_id = capability_task_id(self.job_id, requests)
        try:
            held = self.transport.holds(self.routing.queue("capabilities"), task_id)
        except Exception as exc:  # Redis is away: the message may come back with it
            log.warning("cannot look for the task of %s: %s", requests[0].identity, exc)
            return None
        return "queued" if held else "lost"

    def _watch_one(self, request: CallRequest
                   ) -> tuple[CallReport | None, AttemptRecord | SlotRecord | None]:
        """A committed call's report, or an unresolved attempt's stop; and the call's
        latest attempt (its slot when committed)."""
        assert self.store is not None
        slot = self.store.get_slot(request.run_id, request.identity)
        if slot is not None and slot.same_call(request.capability, request.digest):
            outcome = (Outcome.EXECUTED if slot.revision == request.revision
                       else Outcome.REPLAYED)
            return CallReport(request.identity, request.capability, outcome,
                              result=slot.result, attempted=outcome is Outcome.EXECUTED,
                              committed_by=slot.revision), slot
        if slot is not None:
            return None, slot  # a divergence: the broker's answer names it
        attempt = self.store.latest_attempt(request.run_id, request.identity)
        mine = attempt is not None and attempt.revision == request.revision
        if mine and attempt is not None and (
                attempt.status is AttemptStatus.UNRESOLVED
                or (attempt.status is AttemptStatus.PENDING
                    and attempt_expired(attempt, self.lease_seconds,
                                        store_since=self.store.available_since))):
            if attempt.status is AttemptStatus.PENDING:
                self._mark_unresolved(attempt)
            stop = AttemptUnresolved(
                f"{request.identity} has an unresolved attempt (#{attempt.number}, owner "
                f"{attempt.owner}): its broker worker is gone and the provider may or may "
                f"not have completed it. Resolve it with `revise reconcile {request.run_id} "
                f"'{request.identity}' --from-log FILE`, `--result FILE` or `--abandon`",
                identity=str(request.identity), attempt_id=attempt.id)
            return CallReport(request.identity, request.capability, Outcome.STOPPED,
                              stop=stop, error=stop.to_json()), attempt
        return None, attempt

    def _brokers_alive(self) -> bool:
        if self.brokers is None:
            return True
        try:
            return self.brokers.alive(self.lease_seconds) > 0
        except Exception:  # Redis is away: no verdict on the brokers either
            return True

    def _mark_unresolved(self, attempt: AttemptRecord) -> None:
        """Say so in the store at once (the reconciler's sweep would, a sweep later), so the
        operator can reconcile as soon as the run shows blocked."""
        assert self.store is not None
        try:
            mark_unresolved(self.store, attempt, by="sandbox worker",
                            reason="its owner is gone or its lease expired")
        except StoreUnavailable:
            pass  # the sweep will

    def _outage(self, request: CallRequest, action: str, exc: Exception) -> CallReport:
        """Redis is down: the call may or may not have been queued; stop, fail closed."""
        stop = queue_unavailable(str(self.app.conf.broker_url), action, exc,
                                 identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

    def _poll(self, left: float, sent_at: float) -> float:
        """How long to listen for the answer before looking at the store: the poll
        period, or less when the wave may park sooner."""
        look = self.park.next_look(sent_at)
        return min(_POLL_SECONDS, left, _POLL_SECONDS if look is None else look)

    def _parked(self, request: CallRequest) -> CallReport:
        stop = Parked(f"the calls from {request.identity} on are in flight at broker workers; "
                      "the job parks until they are settled", identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

    def _no_answer(self, request: CallRequest, why: str) -> CallReport:
        stop = AttemptInFlight(
            f"the capability queue gave {why} for {request.identity}; the call may still "
            "complete and commit. Check that broker workers (-Q capabilities) are running, "
            "then submit again: a committed call replays", identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

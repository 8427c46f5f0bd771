"""The executor a sandbox worker's revision uses: each new call becomes one capability task.

Only new work travels: replays and divergences are decided on the sandbox
worker from the prefix it loaded (``orchestrator.session``). ``RemoteExecutor``
sends ``CallRequest.to_wire()`` to the ``capabilities`` queue and waits for the
``CallReport``. Celery moves single calls only: fanout, joins and ordering stay
in the sandbox runtime and the run store (no chords or groups, whose joins and
error callbacks we cannot make exactly-once).

The task id is derived from (job, identity), so a redelivered sandbox job that
asks for the same call again gets the same task, whose stored answer is
returned without another provider call (see ``workers.capability``).

Why waiting here cannot deadlock: the sandbox worker waits only on tasks of the
``capabilities`` queue, which sandbox workers never consume (``-Q sandbox``);
those tasks run in separate broker worker processes that never wait on
anything queued.

The wait is bounded by what the store and the transport say, not by a constant:
while no answer comes, the call's attempt is watched. A committed slot is the
answer (the result backend may have lost it); an attempt whose owner died or
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
import time
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout

from broker.calls import CallReport, CallRequest, Outcome
from broker.crash_window import attempt_expired, mark_unresolved
from broker.envelope import Envelope
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    BrokerError,
    StoreUnavailable,
)
from broker.outage import is_queue_outage, queue_unavailable
from broker.records import AttemptRecord, AttemptStatus
from broker.store import RunStore
from workers.outcome import answer_of
from workers.roster import Roster
from workers.routing import CAPABILITY_TASK, Routing
from workers.transport import Transport

log = logging.getLogger("revise.remote")

_POLL_SECONDS = 2.0  # between looks at the store while no answer comes
_RESENDS = 1  # a lost capability task is sent again this many times


def capability_task_id(job_id: str, request: CallRequest) -> str:
    return f"{job_id}/call/{request.identity}"


class RemoteExecutor:
    def __init__(self, *, app: Celery, routing: Routing, envelope: Envelope, job_id: str,
                 wait_seconds: float, delivery: int = 1, store: RunStore | None = None,
                 transport: Transport | None = None, brokers: Roster | None = None,
                 lease_seconds: float = 30.0) -> None:
        """``store`` and ``transport`` bound each wait by the call's liveness (without
        them only ``wait_seconds`` does)."""
        self.app = app
        self.routing = routing
        self.job_id = job_id
        self.wait_seconds = wait_seconds
        self.delivery = delivery
        self.store = store
        self.transport = transport
        self.brokers = brokers
        self.lease_seconds = lease_seconds
        self._envelope_wire = envelope.model_dump(mode="json")
        self.timings: list[float] = []

    def _send(self, request: CallRequest) -> Any:
        return self.app.send_task(
            CAPABILITY_TASK, args=[request.to_wire(), self._envelope_wire, self.delivery],
            task_id=capability_task_id(self.job_id, request),
            queue=self.routing.queue("capabilities"))

    def execute(self, request: CallRequest) -> CallReport:
        started = time.perf_counter()
        try:
            sent = self._send(request)
        except Exception as exc:
            if not is_queue_outage(exc):
                raise
            return self._outage(request, f"sending the call at {request.identity}", exc)
        try:
            return self._wait(request, sent)
        finally:
            self.timings.append(time.perf_counter() - started)

    def _wait(self, request: CallRequest, result: Any) -> CallReport:
        deadline = time.monotonic() + self.wait_seconds
        sent_at, resends = time.monotonic(), 0
        nobody_since: float | None = None
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return self._no_answer(request, f"no answer within {self.wait_seconds:.0f} s")
            try:
                answer: Any = result.get(timeout=min(_POLL_SECONDS, left), propagate=False,
                                         disable_sync_subtasks=False)
            except CeleryTimeout:
                pass
            except Exception as exc:  # the result backend (Redis) does not answer
                log.warning("waiting for %s: the result backend failed (%s)", request.identity,
                            exc)
                time.sleep(min(_POLL_SECONDS, max(left, 0)))
            else:
                if result.failed():
                    carried = answer_of(answer)  # a failed, denied or stopped call
                    if carried is not None:
                        return CallReport.from_wire(carried)
                    raise BrokerError(f"capability task for {request.identity} failed: "
                                      f"{answer!r}", identity=str(request.identity))
                return CallReport.from_wire(answer)
            found = self._watch(request, sent_at)
            if isinstance(found, CallReport):
                return found
            if found == "queued":  # still queued: is any broker worker alive to take it?
                if self._brokers_alive():
                    nobody_since = None
                elif nobody_since is None:
                    nobody_since = time.monotonic()
                elif time.monotonic() - nobody_since > self.lease_seconds:
                    return self._no_answer(request, "no live broker worker for "
                                           f"{self.lease_seconds:.0f} s")
            if found == "lost":
                if resends >= _RESENDS:
                    return self._no_answer(request, "no broker worker took the call (its "
                                           "task message was lost twice)")
                log.warning("the capability task for %s was lost; sending it again",
                            request.identity)
                result, sent_at, resends = self._send(request), time.monotonic(), resends + 1

    def _watch(self, request: CallRequest, sent_at: float) -> CallReport | str | None:
        """What the store says about a call that has not answered yet: its report, "lost",
        or None (still in flight)."""
        if self.store is None:
            return None
        try:
            slot = self.store.get_slot(request.run_id, request.identity)
            if slot is not None and slot.same_call(request.capability, request.digest):
                outcome = (Outcome.EXECUTED if slot.revision == request.revision
                           else Outcome.REPLAYED)
                return CallReport(request.identity, request.capability, outcome,
                                  result=slot.result, attempted=outcome is Outcome.EXECUTED,
                                  committed_by=slot.revision)
            if slot is not None:
                return None  # a divergence: the broker's answer names it
            attempt = self.store.latest_attempt(request.run_id, request.identity)
        except StoreUnavailable:
            return None  # the store is away: its answer decides when it is back
        if attempt is not None and attempt.revision == request.revision and (
                attempt.status is AttemptStatus.UNRESOLVED
                or (attempt.status is AttemptStatus.PENDING
                    and attempt_expired(attempt, self.lease_seconds))):
            if attempt.status is AttemptStatus.PENDING:
                self._mark_unresolved(attempt)
            stop = AttemptUnresolved(
                f"{request.identity} has an unresolved attempt (#{attempt.number}, owner "
                f"{attempt.owner}): its broker worker is gone and the provider may or may "
                f"not have completed it. Resolve it with `revise reconcile {request.run_id} "
                f"'{request.identity}' --from-log FILE`, `--result FILE` or `--abandon`",
                identity=str(request.identity), attempt_id=attempt.id)
            return CallReport(request.identity, request.capability, Outcome.STOPPED,
                              stop=stop, error=stop.to_json())
        if attempt is None and self.transport is not None \
                and time.monotonic() - sent_at > self.lease_seconds:
            task_id = capability_task_id(self.job_id, request)
            try:
                held = self.transport.holds(self.routing.queue("capabilities"), task_id)
            except Exception as exc:  # Redis is away: the message may come back with it
                log.warning("cannot look for the task of %s: %s", request.identity, exc)
                return None
            return "queued" if held else "lost"
        return None

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

    def _no_answer(self, request: CallRequest, why: str) -> CallReport:
        stop = AttemptInFlight(
            f"the capability queue gave {why} for {request.identity}; the call may still "
            "complete and commit. Check that broker workers (-Q capabilities) are running, "
            "then submit again: a committed call replays", identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

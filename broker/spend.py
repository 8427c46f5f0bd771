"""Executing claimed calls: the provider, then the commit (the spending half).

A claimed call (``broker.claim``) is a pending attempt nobody sent yet. Executing it:

    provider turn (``broker.provider_gate``) → take it (its dispatch record, the atomic
    "this copy sends it") → provider, asked again under the same key after a 429 or,
    where keys are honoured, after a failure it may have charged for → commit (ONE
    transaction: slot + attempt settled), or the attempt failed / uncertain

A paid result is never lost: when the store does not answer, it goes to the spool
(fsynced) and the commit is retried; a broker worker drains the spool on start.
The attempt's heartbeat runs from the take to the end. Each step fails closed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from broker.calls import CallReport, ClaimedCall, Outcome, stop_report
from broker.catalog import Capability, lookup
from broker.charging import RATE_LIMIT_WAIT_CAP, Charge, charge_of
from broker.claim import deployment_terms
from broker.crash_window import mark_unresolved
from broker.errors import (
    AttemptUnresolved,
    CapabilityError,
    ReplayDivergence,
    SafetyStop,
    SlotConflict,
    StoreUnavailable,
)
from broker.heartbeats import AttemptHeartbeats
from broker.owner import current_owner
from broker.provider_gate import ProviderGate
from broker.providers import CallContext, Provider
from broker.records import AttemptRecord, SlotRecord
from broker.settings import Settings
from broker.spool import CommitSpool
from broker.store import RunStore

log = logging.getLogger("revise.spend")


class Spender:
    def __init__(self, *, store: RunStore, provider: Provider, settings: Settings,
                 call_timeout_seconds: float | None = None, concurrency: int = 8,
                 heartbeats: AttemptHeartbeats | None = None,
                 spool: CommitSpool | None = None, gate: ProviderGate | None = None) -> None:
        """``heartbeats``, ``spool`` and ``gate`` are the process's (a worker shares one of
        each); ``concurrency``: calls of one ``execute`` in flight at once."""
        self.store = store
        self.provider = provider
        self.settings = settings
        self.call_timeout_seconds = call_timeout_seconds
        self.concurrency = concurrency
        self.spool = spool or CommitSpool(settings.spool_dir)
        self.heartbeats = heartbeats or AttemptHeartbeats(
            store, settings.attempt_lease_seconds / 3)
        self.gate = gate or ProviderGate(settings.provider_concurrency)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def close(self) -> None:
        """Wait for the calls still being spent and let their threads go."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def execute(self, calls: Sequence[ClaimedCall]
                ) -> Iterator[tuple[ClaimedCall, CallReport | None]]:
        """Each call with its report, as its provider answers and its commit lands (at
        most ``concurrency`` at once); None for a call this process did not send (another
        copy took it, or it was withdrawn)."""
        if len(calls) == 1:
            yield calls[0], self.spend(calls[0])
            return
        futures = {self._spend_pool().submit(self.spend, call): call for call in calls}
        for future in as_completed(futures):
            yield futures[future], future.result()

    def _spend_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.concurrency,
                                                thread_name_prefix="revise-spend")
            return self._pool

    def spend(self, call: ClaimedCall) -> CallReport | None:
        """Never raises a safety stop: reports it."""
        attempt = call.attempt
        capability = lookup(attempt.capability)
        try:
            with self.gate.turn(capability.provider):
                owner = current_owner()
                if not self._take(attempt, owner):
                    return None
                with self.heartbeats.hold(attempt.id):
                    return self._spent(call, capability)
        except SafetyStop as stop:
            return stop_report(attempt.identity, attempt.capability, stop)

    def _take(self, attempt: AttemptRecord, owner: str) -> bool:
        """The attempt's dispatch record, written before its request leaves. Nothing was
        sent yet, so a store that does not answer is waited for (within the commit's
        retry budget) rather than failing the call: the rest of its wave may already be
        paid, and the run must not stop for an outage."""
        deadline = time.monotonic() + self.settings.commit_retry_seconds
        delay = 0.25
        while True:
            try:
                return self.store.take_attempt(attempt.id, owner)
            except StoreUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("the dispatch record of attempt #%s at %s cannot be written "
                            "(%s); nothing was sent, waiting for the store", attempt.number,
                            attempt.identity, exc.message)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)

    def _spent(self, call: ClaimedCall, capability: Capability) -> CallReport:
        attempt = call.attempt
        try:
            answer = self._call_provider(call, capability)
        except _Refused as refused:
            return self._failed(attempt, capability, refused.error, refused.earlier)
        slot = SlotRecord(run_id=attempt.run_id, identity=attempt.identity,
                          capability=capability.name, digest=attempt.digest,
                          fingerprint=attempt.fingerprint, result=answer.result,
                          usage=answer.usage, cost=answer.cost, revision=attempt.revision,
                          chain_fingerprint=attempt.chain_fingerprint, line=attempt.line)
        try:
            stored = self._commit(slot, attempt.id)
        except SlotConflict as exc:
            raise ReplayDivergence(exc.message, identity=str(attempt.identity)) from None
        return CallReport(attempt.identity, capability.name, Outcome.EXECUTED,
                          result=stored.result, attempted=True, cost=answer.cost,
                          committed_by=stored.revision)

    def _failed(self, attempt: AttemptRecord, capability: Capability,
                exc: CapabilityError, earlier: CapabilityError | None) -> CallReport:
        """The provider's last error is the attempt's answer: failed, or uncertain when the
        provider may have charged for it, or for an ``earlier`` answer under the same key
        (paid until an operator decides)."""
        maybe = earlier is not None or charge_of(
            exc, deployment_terms(capability, self.settings)).charge is Charge.MAYBE
        error = failure_error(exc, attempt, maybe, earlier)
        self.store.fail_attempt(attempt.id, error, uncertain=maybe)
        return CallReport(attempt.identity, capability.name, Outcome.FAILED, error=error,
                          attempted=True, cost=capability.unit_price if maybe else 0.0)

    # ---- the commit of a paid result: never lost -------------------------------------------

    def _commit(self, slot: SlotRecord, attempt_id: int) -> SlotRecord:
        """Commit; when the store does not answer, spool the paid result (fsynced) and
        retry with backoff for ``commit_retry_seconds``. Past that the file stays in the
        spool and a broker worker commits it when the store answers (``drain_spool``).
        The attempt's heartbeat runs through the retries, so it is fresh again as soon as
        the store answers."""
        try:
            return self.store.commit(slot, attempt_id)
        except StoreUnavailable as exc:
            path = self.spool.keep(slot, attempt_id)
            log.warning("commit of the paid result at %s in run %s failed (%s); kept in %s, "
                        "retrying", slot.identity, slot.run_id, exc.message, path)
        deadline = time.monotonic() + self.settings.commit_retry_seconds
        delay = 0.25
        while True:
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            try:
                stored = self.store.commit(slot, attempt_id)
            except StoreUnavailable as exc:
                if time.monotonic() < deadline:
                    delay = min(delay * 2, 5.0)
                    continue
                raise StoreUnavailable(
                    f"{exc.message}. The provider answered the call at {slot.identity}; its "
                    f"result is kept in {path} and a broker worker commits it when the "
                    "store answers (it is never paid again)", identity=str(slot.identity),
                    spool=str(path)) from None
            except SlotConflict:
                self.spool.remove(path)
                raise
            self.spool.remove(path)
            self._event_at(slot, "commit_recovered", "the paid result was kept in the "
                           "spool while the store did not answer and is now committed")
            return stored

    def drain_spool(self) -> int:
        """Commit every spooled paid result (a worker's first duty after a restart)."""
        def commit(slot: SlotRecord, attempt_id: int | None) -> None:
            try:
                self.store.commit(slot, attempt_id)
            except SlotConflict as exc:  # another result is the truth: nothing to keep
                log.error("spooled result at %s in run %s conflicts: %s", slot.identity,
                          slot.run_id, exc.message)
                return
            self._event_at(slot, "commit_recovered", "a paid result kept in the spool is "
                           "now committed")

        return self.spool.drain(commit)

    def _event_at(self, slot: SlotRecord, kind: str, message: str) -> None:
        try:
            self.store.add_event(slot.run_id, kind, message, revision=slot.revision,
                                 identity=slot.identity)
        except StoreUnavailable:
            log.warning("could not record event %s for %s", kind, slot.identity)

    def _call_provider(self, call: ClaimedCall, capability: Capability) -> Any:
        """The provider's answer. Asked again under the same idempotency key, at most
        ``unknown_outcome_retries`` times, when it rate-limited the request (after its
        Retry-After, which the whole process honours) or when it may have charged and
        honours keys (it answers with the work it did); any other error is the attempt's
        answer, still maybe charged when an earlier one was. A provider that raises
        something else may or may not have completed: the attempt is unresolved."""
        attempt = call.attempt
        context = CallContext(attempt.run_id, str(attempt.identity),
                              attempt.idempotency_key or "",
                              timeout_seconds=self.call_timeout_seconds)
        terms = deployment_terms(capability, self.settings)
        retries = self.settings.unknown_outcome_retries
        earlier: CapabilityError | None = None  # an answer it may have charged for
        for round_ in range(retries + 1):
            try:
                return self.provider.execute(capability, call.payload, context)
            except CapabilityError as exc:
                verdict = charge_of(exc, terms)
                limited = verdict.charge is Charge.RATE_LIMITED
                maybe = verdict.charge is Charge.MAYBE
                if verdict.wait_seconds > 0:  # a 429, or a 503 saying when to come back:
                    # the whole process pauses, whether this call asks again or not
                    self.gate.cool_down(capability.provider,
                                        min(verdict.wait_seconds, COOL_DOWN_CEILING))
                again = round_ < retries and (
                    (limited and verdict.wait_seconds <= RATE_LIMIT_WAIT_CAP)
                    or (maybe and terms.honours_idempotency_key))
                if not again:  # a free answer after a maybe-charged one stays maybe charged
                    raise _Refused(_waited_for(exc, verdict.wait_seconds, round_) if limited
                                   else exc, None if maybe else earlier) from None
                earlier = earlier or (exc if maybe else None)
                log.warning("%s at %s in run %s (%s); asking again with the same "
                            "idempotency key", verdict.charge, attempt.identity,
                            attempt.run_id, exc.message)
                if limited:
                    self.gate.wait(capability.provider)
                else:
                    time.sleep(min(max(0.2 * 2 ** round_, verdict.wait_seconds),
                                   RATE_LIMIT_WAIT_CAP))
            except Exception as exc:
                # We cannot tell whether the provider completed: fail closed, never retry.
                log.exception("provider failed at %s in run %s", attempt.identity,
                              attempt.run_id)
                mark_unresolved(self.store, attempt, by="revise",
                                reason="the provider call ended without an answer")
                raise AttemptUnresolved(
                    f"provider call at {attempt.identity} ended without an answer ({exc}); "
                    "it may have completed. Resolve it with `revise reconcile`",
                    identity=str(attempt.identity), attempt_id=attempt.id) from None
        raise AssertionError("unreachable")


# The longest pause a provider's Retry-After imposes on a whole process (an answer asking
# for hours would hold every call to that provider for as long).
COOL_DOWN_CEILING = 300.0


def _waited_for(exc: CapabilityError, wait: float, round_: int) -> CapabilityError:
    """A rate limit that ends the call, saying what the provider asked for."""
    if wait > RATE_LIMIT_WAIT_CAP:
        why = (f"the provider asked to wait {wait:.0f} s (Retry-After), more than the "
               f"{RATE_LIMIT_WAIT_CAP:.0f} s a call waits; its other requests from this "
               "process wait it out; try later, or lower REVISE_PROVIDER_CONCURRENCY")
    else:
        why = (f"still rate limited after {round_ + 1} tries (REVISE_UNKNOWN_OUTCOME_RETRIES)"
               "; lower REVISE_PROVIDER_CONCURRENCY to stay within the provider's limit")
    return CapabilityError(f"{exc.message}; {why}", **exc.fields)


class _Refused(Exception):
    """The provider's last error for an attempt, and an ``earlier`` one under the same key
    that it may have charged for (None when the last may have been charged, or none)."""

    def __init__(self, error: CapabilityError, earlier: CapabilityError | None) -> None:
        super().__init__(error.message)
        self.error, self.earlier = error, earlier


def failure_error(exc: CapabilityError, attempt: AttemptRecord, maybe: bool,
                  earlier: CapabilityError | None = None) -> dict[str, Any]:
    """The error a failed attempt stores and its script sees (``CapabilityError``)."""
    error = {**exc.to_json(), "identity": str(attempt.identity),
             "status": exc.fields.get("status"),
             "code": exc.fields.get("provider_code", exc.code),
             "charged": "maybe" if maybe else "no"}
    if earlier is not None:
        error["message"] = (f"{exc.message}, asked again under the same idempotency key "
                            f"after an answer it may have charged for ({earlier.message})")
    if maybe:
        error["message"] = (
            f"{error['message']}. The provider may have charged for this request: it counts "
            "as paid, and the same request is not paid for again in this run unless an "
            "operator says it was not charged")
    return error

"""The broker: the spending half of the calls of a wave, one function for every caller.

The host decided the calls are new work (``broker.prefix``); the broker makes
sure, then spends:

    authorize (grants, schema) → ledger copy → claim (ONE transaction for the
    wave: committed already? paid elsewhere? an open attempt in the way? budget?
    is the revision still running? claim an attempt per call and store its
    payload blob; a stop anywhere claims nothing) → provider → commit (ONE
    transaction per result: slot + attempt settled)

Each step fails closed. The embedded revision and the Celery capability worker
both call ``Broker.execute_wave``; a redelivered or concurrent duplicate finds the
committed slot, its revision's failed attempt or the open attempt in the claim
transaction, never a second provider call.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import replace
from typing import Any

from broker.calls import CallReport, CallRequest, Outcome
from broker.catalog import Capability, lookup
from broker.charging import RATE_LIMIT_WAIT_CAP, Charge, ProviderTerms, charge_of
from broker.crash_window import attempt_expired, mark_unresolved
from broker.envelope import Budget, Envelope
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    BudgetExceeded,
    CapabilityDenied,
    CapabilityError,
    LedgerUnavailable,
    ReplayDivergence,
    RevisionNotRunning,
    SafetyStop,
    SemanticRepeatDenied,
    SlotConflict,
    StoreUnavailable,
    TakeNotApproved,
)
from broker.grants import authorize
from broker.heartbeats import AttemptHeartbeats
from broker.identity import call_bytes, call_digest
from broker.ledger import Ledger, LedgerAction, ledger_action
from broker.owner import current_owner
from broker.providers import CallContext, Provider
from broker.records import AttemptRecord, AttemptStatus, Begin, CallClaim, PaidAt, SlotRecord
from broker.settings import LedgerPolicy, Settings
from broker.spool import CommitSpool
from broker.store import RunStore

log = logging.getLogger("revise.broker")

_OUTCOME_OF_STOP: dict[type, Outcome] = {
    ReplayDivergence: Outcome.DIVERGED, CapabilityDenied: Outcome.DENIED,
    BudgetExceeded: Outcome.DENIED, SemanticRepeatDenied: Outcome.DENIED,
    TakeNotApproved: Outcome.DENIED,
}


def outcome_of(stop: SafetyStop) -> Outcome:
    return _OUTCOME_OF_STOP.get(type(stop), Outcome.STOPPED)


def budget_check(budget: Budget) -> Any:
    """The budget as a check the store runs inside the claim transaction (None: no limit)."""
    if budget.max_calls is None and budget.max_cost is None:
        return None

    def refusal(capability: str, calls: int, spent: float) -> str | None:
        if budget.max_calls is not None and calls + 1 > budget.max_calls:
            return (f"it would be provider call {calls + 1}; the envelope allows "
                    f"{budget.max_calls}. Raise budget.max_calls or do less")
        price = lookup(capability).unit_price
        if budget.max_cost is not None and spent + price > budget.max_cost:
            return (f"it would bring spend to {spent + price:.4f}; the envelope allows "
                    f"{budget.max_cost}. Raise budget.max_cost or do less")
        return None

    return refusal


READ_ONLY_RETRIES = 3  # a read-only call whose worker died is retried at most this often

_turns: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_turns_lock = threading.Lock()


def provider_turn(kind: str, limit: int | None) -> Any:
    """A turn at provider ``kind``: at most ``limit`` requests of this process at once
    (every broker of the process shares the count); no limit: no wait."""
    if limit is None:
        return contextlib.nullcontext()
    with _turns_lock:
        return _turns.setdefault((kind, limit), threading.BoundedSemaphore(limit))


def _price(name: str) -> float:
    return lookup(name).unit_price


class Broker:
    def __init__(self, *, store: RunStore, provider: Provider, envelope: Envelope,
                 settings: Settings, ledger: Ledger | None = None,
                 owner: str | None = None, spool: CommitSpool | None = None,
                 heartbeats: AttemptHeartbeats | None = None) -> None:
        """``ledger`` is a copy of the paid-payload ledger outside the store (Redis in a
        deployment), checked before the claim transaction; None when the store is all.
        ``spool`` keeps paid results whose commit failed (default: ``settings.spool_dir``).
        ``heartbeats`` renews the attempts this process holds open (a worker shares one)."""
        self.store = store
        self.ledger = ledger
        self.provider = provider
        self.envelope = envelope
        self.settings = settings
        self._owner = owner
        self.spool = spool or CommitSpool(settings.spool_dir)
        self.heartbeats = heartbeats or AttemptHeartbeats(
            store, settings.attempt_lease_seconds / 3)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @property
    def owner(self) -> str:
        return self._owner or current_owner()

    def close(self) -> None:
        """Wait for the calls still being spent and let their threads go."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def execute(self, request: CallRequest) -> CallReport:
        """Spend on one call the host decided is new (a wave of one)."""
        return next(iter(self.execute_wave([request])))

    def execute_wave(self, requests: Sequence[CallRequest]) -> Iterator[CallReport]:
        """Spend on the new calls of one wave (all of one run and revision); never raises a
        safety stop, reports it.

        The wave is decided in one claim transaction, whole or not at all: a stop at any
        of its calls is the one report yielded and nothing of the wave reaches the
        provider. Otherwise every call is answered: replays and this revision's failed
        calls at once, claimed calls as their provider answers and their commit lands (at
        most ``envelope.concurrency`` at a time)."""
        try:
            decided = self._decide(requests)
        except SafetyStop as stop:
            yield self._stopped(self._stopped_at(requests, stop), stop)
            return
        spend: list[tuple[CallRequest, Capability, AttemptRecord]] = []
        for request, capability, begin in decided:
            if begin.claimed:
                assert begin.attempt is not None
                spend.append((request, capability, begin.attempt))
            elif begin.slot is not None:
                yield self._already_committed(request, begin.slot)
            else:
                assert begin.failed is not None
                yield CallReport(request.identity, request.capability, Outcome.FAILED,
                                 error=begin.failed.error, committed_by=None)
        if len(spend) == 1:
            yield self._spend_reported(*spend[0])
            return
        futures = [self._spend_pool().submit(self._spend_reported, *one) for one in spend]
        for future in as_completed(futures):
            yield future.result()

    def _already_committed(self, request: CallRequest, slot: SlotRecord) -> CallReport:
        """The same call committed at this identity (the claim checked it): a replay."""
        return CallReport(request.identity, request.capability, Outcome.REPLAYED,
                          result=slot.result, committed_by=slot.revision)

    def _spend_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self.envelope.concurrency,
                                                thread_name_prefix="revise-spend")
            return self._pool

    def _stopped(self, request: CallRequest, stop: SafetyStop) -> CallReport:
        self._event(request, "call_stopped", stop.message, code=stop.code)
        return CallReport(request.identity, request.capability, outcome_of(stop),
                          stop=stop, error=stop.to_json())

    @staticmethod
    def _stopped_at(requests: Sequence[CallRequest], stop: SafetyStop) -> CallRequest:
        return next((r for r in requests if str(r.identity) == stop.identity), requests[0])

    def _spend_reported(self, request: CallRequest, capability: Capability,
                        attempt: AttemptRecord) -> CallReport:
        try:
            return self._spend(request, capability, attempt)
        except SafetyStop as stop:
            return self._stopped(request, stop)

    # ---- before the provider ----------------------------------------------------------------

    def _decide(self, requests: Sequence[CallRequest]
                ) -> list[tuple[CallRequest, Capability, Begin]]:
        """Authorize every call, look in the ledger copy, then claim the wave."""
        checked: list[tuple[CallRequest, Capability]] = []
        for request in requests:
            capability, payload = authorize(self.envelope, request.capability,
                                            request.payload, identity=str(request.identity))
            if call_digest(payload, request.take) != request.digest:
                raise ReplayDivergence(f"the call at {request.identity} arrived with a digest "
                                       "that does not match its payload",
                                       identity=str(request.identity))
            request = replace(request, payload=payload)
            if self._checks_ledger(capability) and self.ledger is not None:
                self._ledger_precheck(request, self.ledger)
            checked.append((request, capability))
        begins = self._claim(checked)
        return [(r, c, b) for (r, c), b in zip(checked, begins, strict=True)]

    def _checks_ledger(self, capability: Capability) -> bool:
        """The ledger policy (the envelope's, else the deployment's) denies a repeat of
        this capability; under warn or off a repeat pays (the host warned)."""
        policy = LedgerPolicy(self.envelope.ledger_policy or self.settings.ledger_policy)
        return ledger_action(policy, capability) is LedgerAction.DENY

    def terms(self, capability: Capability) -> ProviderTerms:
        """The catalog's terms for the capability's provider, with the deployment's word on
        whether its HTTP provider honours idempotency keys."""
        terms = capability.terms
        if self.settings.provider == "http" and capability.provider != "dry-run":
            terms = terms.with_keys(self.settings.provider_honours_idempotency_key)
        return terms

    def _ledger_precheck(self, request: CallRequest, ledger: Ledger) -> None:
        """A fast look in the deployment's ledger copy; the claim transaction re-checks."""
        try:
            paid = ledger.paid(request.run_id, request.capability, request.digest,
                               request.revision)
        except LedgerUnavailable:
            # A call already committed (a redelivery after a Redis loss) is replayed by the
            # claim transaction: it was paid, so never report it as "not dispatched".
            if self.store.get_slot(request.run_id, request.identity) is not None:
                return
            raise
        paid = [i for i in paid if i != request.identity]
        if paid:
            raise self._repeat(request, PaidAt(paid[0], 0, "committed"))

    def _repeat(self, request: CallRequest, paid: PaidAt) -> SemanticRepeatDenied:
        where = str(paid.identity) + (f" (line {paid.line})" if paid.line else "")
        if paid.why == "may have been charged":
            how = (f"was sent at {where}, where the provider answered with an error after "
                   "which it may have charged; it counts as paid until an operator decides "
                   f"(`revise reconcile {request.run_id} '{paid.identity}' --result FILE` "
                   "if the provider did the work, `--abandon` if it did not)")
        elif paid.why == "in flight":
            how = f"is being paid for at {where} (in this wave or a concurrent one)"
        else:
            how = f"was already paid at {where}"
        return SemanticRepeatDenied(
            f"semantic repeat at {request.identity}: this exact {request.capability} payload "
            f"{how}; denied before dispatch. Reuse the result of that call (keep one call "
            "for the payload and pass its result on) or change the payload",
            identity=str(request.identity), committed_identity=str(paid.identity),
            committed_line=paid.line)

    def _claim(self, checked: list[tuple[CallRequest, Capability]]) -> list[Begin]:
        """The claim transaction, again until nothing is in the way: an open attempt of a
        live owner (a concurrent or redelivered copy still calling the provider) is
        waited for and then replayed; one whose owner is gone is marked unresolved."""
        first = checked[0][0]
        approved = set(self.envelope.approved_takes)
        claims = [CallClaim(r.identity, c.name, r.digest,
                            check_ledger=self._checks_ledger(c),
                            payload=call_bytes(r.payload, r.take),
                            dedupes=self.terms(c).honours_idempotency_key,
                            lower_takes=tuple(call_digest(r.payload, k)
                                              for k in range(1, r.take)),
                            take_approved=c.name in approved) for r, c in checked]
        delay = 0.02
        while True:
            begins = self.store.begin_calls(
                first.run_id, first.revision, self.owner, claims,
                budget=budget_check(self.envelope.budget), price_of=_price)
            in_the_way = in_flight = False
            for (request, capability), begin in zip(checked, begins, strict=True):
                self._raise_stop(request, begin)
                if begin.in_the_way:
                    assert begin.attempt is not None
                    in_the_way = True
                    in_flight = self._clear(request, capability, begin.attempt) or in_flight
            if not in_the_way:
                return begins
            if in_flight:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    def _raise_stop(self, request: CallRequest, begin: Begin) -> None:
        where = str(request.identity)
        if begin.stale is not None:
            raise RevisionNotRunning(
                f"the call at {where} belongs to revision {request.revision} of run "
                f"{request.run_id}, which is {begin.stale}, not running: nothing is spent",
                identity=where, status=begin.stale)
        if begin.slot is not None and not begin.slot.same_call(request.capability,
                                                              request.digest):
            raise ReplayDivergence(
                f"{where} is committed with another payload and cannot change; the run "
                "stops before any new effect", identity=where,
                committed_digest=begin.slot.digest, digest=request.digest)
        if begin.repeat is not None:
            raise self._repeat(request, begin.repeat)
        if begin.take is not None:
            paid = begin.take
            raise TakeNotApproved(
                f"take {request.take} at {where}: this {request.capability} payload was "
                f"already paid at {paid.identity}" + (f" (line {paid.line})" if paid.line
                                                      else "")
                + f" in revision {paid.revision}, and a further take is a human's decision, "
                "not a repair's. Reuse the committed result; a person who wants another "
                f"take adds \"{request.capability}\" to the envelope's approved_takes",
                identity=where, committed_identity=str(paid.identity),
                capability=request.capability)
        if begin.over_budget is not None:
            raise BudgetExceeded(f"call at {where}: {begin.over_budget}", identity=where)

    def _clear(self, request: CallRequest, capability: Capability, existing: AttemptRecord
               ) -> bool:
        """An open attempt is in the way. True while its owner is alive (wait); else it is
        unresolved, which stops a side-effecting call, and a read-only one is abandoned
        and retried (at most ``READ_ONLY_RETRIES`` times: its worker may keep dying)."""
        if existing.status is AttemptStatus.UNCERTAIN:
            raise AttemptUnresolved(
                f"{request.identity} was sent in revision {existing.revision} (attempt "
                f"#{existing.number}) and the provider answered with an error after which it "
                "may have charged; this provider does not deduplicate by idempotency key, so "
                "asking again may pay twice. Resolve it with `revise reconcile "
                f"{request.run_id} '{request.identity}' --result FILE` if the provider did "
                "the work, or `--abandon` if it did not", identity=str(request.identity),
                attempt_id=existing.id)
        lease = self.settings.attempt_lease_seconds
        if existing.status is AttemptStatus.PENDING and not attempt_expired(
                existing, lease, store_since=self.store.available_since):
            return True
        if existing.status is AttemptStatus.PENDING:
            marked = mark_unresolved(self.store, existing, by="revise",
                                     reason="owner is gone and the attempt never committed")
            if marked is None:
                return False  # committed or marked meanwhile: claim again to see which
            existing = marked
        retried = sum(1 for a in self.store.list_attempts(request.run_id)
                      if a.identity == request.identity and a.status is AttemptStatus.ABANDONED)
        if capability.side_effecting or retried >= READ_ONLY_RETRIES:
            why = ("the provider may or may not have completed it" if capability.side_effecting
                   else f"its worker died {retried + 1} times; it is not retried again")
            raise AttemptUnresolved(
                f"{request.identity} has an unresolved attempt (#{existing.number}, owner "
                f"{existing.owner}): {why}. Resolve it with `revise reconcile "
                f"{request.run_id} '{request.identity}' --result FILE` or `--abandon`",
                identity=str(request.identity), attempt_id=existing.id)
        # Read-only capability: a repeat costs budget, not a duplicate artifact.
        self.store.resolve_attempt(existing.id, AttemptStatus.ABANDONED, operator="revise",
                                   reason="read-only capability: auto-abandoned for retry")
        return False

    # ---- the provider and the commit --------------------------------------------------------

    def _spend(self, request: CallRequest, capability: Capability,
               attempt: AttemptRecord) -> CallReport:
        call = CallContext(request.run_id, str(request.identity), attempt.idempotency_key or "",
                           timeout_seconds=self.envelope.call_timeout_seconds)
        with self.heartbeats.hold(attempt.id):
            try:
                with provider_turn(capability.provider, self.settings.provider_concurrency):
                    if not self._record_dispatch(attempt):
                        raise AttemptInFlight(
                            f"the attempt at {request.identity} was taken back before its "
                            "request left (its owner was judged gone); nothing was sent. "
                            "Submit the run again: the call runs once",
                            identity=str(request.identity), attempt_id=attempt.id)
                    answer = self._call_provider(request, capability, call, attempt)
            except CapabilityError as exc:
                maybe = charge_of(exc, self.terms(capability)).charge is Charge.MAYBE
                error = {**exc.to_json(), "identity": str(request.identity),
                         "status": exc.fields.get("status"),
                         "code": exc.fields.get("provider_code", exc.code),
                         "charged": "maybe" if maybe else "no"}
                if maybe:
                    error["message"] = (
                        f"{exc.message}. The provider may have charged for this request: it "
                        "counts as paid, and the same request is not paid for again in "
                        "this run unless an operator says it was not charged")
                self.store.fail_attempt(attempt.id, error, uncertain=maybe)
                return CallReport(request.identity, capability.name, Outcome.FAILED,
                                  error=error, attempted=True, cost=capability.unit_price)
            slot = SlotRecord(run_id=request.run_id, identity=request.identity,
                              capability=capability.name, digest=request.digest,
                              fingerprint=request.fingerprint, result=answer.result,
                              usage=answer.usage, cost=answer.cost, revision=request.revision,
                              chain_fingerprint=request.chain_fingerprint, line=request.line)
            try:
                stored = self._commit(slot, attempt.id)
            except SlotConflict as exc:
                raise ReplayDivergence(exc.message, identity=str(request.identity)) from None
        if self.ledger is not None:
            self.ledger.record(stored)
        return CallReport(request.identity, capability.name, Outcome.EXECUTED,
                          result=stored.result, attempted=True, cost=answer.cost,
                          committed_by=stored.revision)

    def _record_dispatch(self, attempt: AttemptRecord) -> bool:
        """The attempt's dispatch record, written before its request leaves. Nothing was
        sent yet, so a store that does not answer is waited for (within the commit's
        retry budget, the attempt heartbeat running) rather than failing the call: the
        rest of its wave may already be paid, and the run must not stop for an outage."""
        deadline = time.monotonic() + self.settings.commit_retry_seconds
        delay = 0.25
        while True:
            try:
                return self.store.sent_attempt(attempt.id)
            except StoreUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                log.warning("the dispatch record of attempt #%s at %s cannot be written "
                            "(%s); nothing was sent, waiting for the store", attempt.number,
                            attempt.identity, exc.message)
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, 5.0)

    # ---- the commit of a paid result: never lost -------------------------------------------

    def _commit(self, slot: SlotRecord, attempt_id: int) -> SlotRecord:
        """Commit; when the store does not answer, spool the paid result (fsynced) and
        retry with backoff for ``commit_retry_seconds``. Past that the file stays in the
        spool and a broker worker commits it when the store answers (``drain_spool``).
        The caller's attempt heartbeat runs through the retries, so the attempt is fresh
        again as soon as the store answers."""
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
                stored = self.store.commit(slot, attempt_id)
            except SlotConflict as exc:  # another result is the truth: nothing to keep
                log.error("spooled result at %s in run %s conflicts: %s", slot.identity,
                          slot.run_id, exc.message)
                return
            if self.ledger is not None:
                self.ledger.record(stored)
            self._event_at(slot, "commit_recovered", "a paid result kept in the spool is "
                           "now committed")

        return self.spool.drain(commit)

    def _event_at(self, slot: SlotRecord, kind: str, message: str) -> None:
        try:
            self.store.add_event(slot.run_id, kind, message, revision=slot.revision,
                                 identity=slot.identity)
        except StoreUnavailable:
            log.warning("could not record event %s for %s", kind, slot.identity)

    def _call_provider(self, request: CallRequest, capability: Capability, call: CallContext,
                       attempt: AttemptRecord) -> Any:
        """The provider's answer. Asked again under the same idempotency key, at most
        ``unknown_outcome_retries`` times, when it rate-limited the request (after its
        Retry-After) or when it may have charged and honours keys (it answers with the
        work it did); any other error is the attempt's answer. A provider that raises
        something else may or may not have completed: the attempt is unresolved."""
        terms = self.terms(capability)
        retries = self.settings.unknown_outcome_retries
        for round_ in range(retries + 1):
            try:
                return self.provider.execute(capability, request.payload, call)
            except CapabilityError as exc:
                verdict = charge_of(exc, terms)
                again = round_ < retries and (
                    (verdict.charge is Charge.RATE_LIMITED
                     and verdict.wait_seconds <= RATE_LIMIT_WAIT_CAP)
                    or (verdict.charge is Charge.MAYBE and terms.honours_idempotency_key))
                if not again:
                    raise
                log.warning("%s at %s in run %s (%s); asking again with the same "
                            "idempotency key", verdict.charge, request.identity,
                            request.run_id, exc.message)
                time.sleep(verdict.wait_seconds or min(0.2 * 2 ** round_, 2.0))
            except Exception as exc:
                # We cannot tell whether the provider completed: fail closed, never retry.
                log.exception("provider failed at %s in run %s", request.identity,
                              request.run_id)
                mark_unresolved(self.store, attempt, by="revise",
                                reason="the provider call ended without an answer")
                raise AttemptUnresolved(
                    f"provider call at {request.identity} ended without an answer ({exc}); it "
                    "may have completed. Resolve it with `revise reconcile`",
                    identity=str(request.identity), attempt_id=attempt.id) from None
        raise AssertionError("unreachable")

    def _event(self, request: CallRequest, kind: str, message: str, **data: Any) -> None:
        try:
            self.store.add_event(request.run_id, kind, message, revision=request.revision,
                                 identity=request.identity, data=data or None)
        except StoreUnavailable:
            log.warning("could not record event %s for %s: store unavailable", kind,
                        request.identity)

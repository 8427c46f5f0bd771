"""The new calls of a wave, decided once, on the side that asks, in one transaction.

The host decided from its prefix that these calls are new work (``broker.prefix``)
and normalized their payloads (``broker.grants.authorize``). The claim transaction
(``RunStore.begin_calls``) is the decision that counts: is the revision still
running? then per call: committed already (a replay, or a divergence)? its own
failed attempt (the same answer again)? paid or maybe paid anywhere in the run
(a semantic repeat)? a further take nobody approved? within budget? else claim a
pending attempt under the request's idempotency key, with its payload blob. A stop
anywhere claims nothing; an open attempt in the way is waited for while its owner
lives, and is unresolved (stop) or, for a read-only call, abandoned and retried when
its owner is gone.

What comes out is the calls to execute (``ClaimedCall``) and the answers the
transaction already knew; a broker (in-process, or a Celery broker worker reading the
claimed attempts from the store) executes the claimed ones (``broker.spend``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from broker.calls import (
    CallReport,
    CallRequest,
    ClaimedCall,
    ClaimedWave,
    Outcome,
    failed_report,
    stop_report,
)
from broker.catalog import Capability, lookup
from broker.charging import ProviderTerms
from broker.crash_window import attempt_expired, mark_unresolved
from broker.envelope import Budget, Envelope
from broker.errors import (
    AttemptUnresolved,
    BudgetExceeded,
    ReplayDivergence,
    RevisionNotRunning,
    SafetyStop,
    SemanticRepeatDenied,
    TakeNotApproved,
)
from broker.identity import call_bytes, call_digest
from broker.ledger import LedgerAction, ledger_action
from broker.owner import current_owner
from broker.records import AttemptRecord, AttemptStatus, Begin, CallClaim, PaidAt
from broker.settings import LedgerPolicy, Settings
from broker.store import RunStore

READ_ONLY_RETRIES = 3  # a read-only call whose worker died is retried at most this often

BudgetCheck = Callable[[str, int, float], "str | None"]


def budget_check(budget: Budget) -> BudgetCheck | None:
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


def deployment_terms(capability: Capability, settings: Settings) -> ProviderTerms:
    """The catalog's terms for the capability's provider, with the deployment's word on
    whether its HTTP provider honours idempotency keys."""
    terms = capability.terms
    if settings.provider == "http" and capability.provider != "dry-run":
        terms = terms.with_keys(settings.provider_honours_idempotency_key)
    return terms


def _price(name: str) -> float:
    return lookup(name).unit_price


@dataclass(frozen=True)
class Decided:
    """The claim transaction's word on one call: ``claimed`` (execute it), else its
    answer (``report``): committed already, or this revision's own failed attempt."""

    claimed: ClaimedCall | None = None
    report: CallReport | None = None


class Claimer:
    def __init__(self, *, store: RunStore, envelope: Envelope, settings: Settings,
                 owner: str | None = None) -> None:
        """``owner``: the attempts' owner until a broker takes them (default: the
        calling thread)."""
        self.store = store
        self.envelope = envelope
        self.settings = settings
        self._owner = owner
        self._budget = budget_check(envelope.budget)

    @property
    def owner(self) -> str:
        return self._owner or current_owner()

    def claim(self, requests: Sequence[CallRequest]) -> list[Decided]:
        """Decide the wave's new calls (one run and revision) whole; a ``SafetyStop``
        when any of them stops (nothing of the wave is claimed then)."""
        checked = [(request, lookup(request.capability)) for request in requests]
        begins = self._claim(checked)
        return [self._decided(request, begin)
                for (request, _), begin in zip(checked, begins, strict=True)]

    def claim_wave(self, requests: Sequence[CallRequest]) -> ClaimedWave:
        """``claim`` for an executor: a stop is the wave's one answer, never raised."""
        try:
            decided = self.claim(requests)
        except SafetyStop as stop:
            at = next((r for r in requests if str(r.identity) == stop.identity), requests[0])
            return ClaimedWave((stop_report(at.identity, at.capability, stop),))
        return ClaimedWave(
            tuple(d.report for d in decided if d.report is not None),
            tuple((r, d.claimed) for r, d in zip(requests, decided, strict=True)
                  if d.claimed is not None))

    @staticmethod
    def _decided(request: CallRequest, begin: Begin) -> Decided:
        if begin.claimed:
            assert begin.attempt is not None
            return Decided(claimed=ClaimedCall(begin.attempt, request.payload))
        if begin.slot is not None:  # the same call committed meanwhile
            # by this revision (before its job parked, or before a redelivery): its own
            # work, executed and paid once; by an earlier one: a replay
            own = begin.slot.revision == request.revision
            return Decided(report=CallReport(
                request.identity, request.capability,
                Outcome.EXECUTED if own else Outcome.REPLAYED, result=begin.slot.result,
                attempted=own, cost=begin.slot.cost if own else 0.0,
                committed_by=begin.slot.revision))
        assert begin.failed is not None  # this revision's failed attempt: its answer again
        return Decided(report=failed_report(request.identity, request.capability,
                                            begin.failed.error or {}, _price(request.capability)))

    def checks_ledger(self, capability: Capability) -> bool:
        """The ledger policy (the envelope's, else the deployment's) denies a repeat of
        this capability; under warn or off a repeat pays (the host warned)."""
        policy = LedgerPolicy(self.envelope.ledger_policy or self.settings.ledger_policy)
        return ledger_action(policy, capability) is LedgerAction.DENY

    def _claims(self, checked: list[tuple[CallRequest, Capability]]) -> list[CallClaim]:
        approved = set(self.envelope.approved_takes)
        return [CallClaim(r.identity, c.name, r.digest, check_ledger=self.checks_ledger(c),
                          payload=call_bytes(r.payload, r.take),
                          dedupes=deployment_terms(c, self.settings).honours_idempotency_key,
                          lower_takes=tuple(call_digest(r.payload, k)
                                            for k in range(1, r.take)),
                          take_approved=c.name in approved, take=r.take,
                          fingerprint=r.fingerprint, chain_fingerprint=r.chain_fingerprint,
                          line=r.line) for r, c in checked]

    def _claim(self, checked: list[tuple[CallRequest, Capability]]) -> list[Begin]:
        """The claim transaction, again until nothing is in the way: an open attempt of a
        live owner (a concurrent or redelivered copy still calling the provider) is
        waited for and then replayed; one whose owner is gone is marked unresolved."""
        first = checked[0][0]
        claims = self._claims(checked)
        delay = 0.02
        while True:
            begins = self.store.begin_calls(first.run_id, first.revision, self.owner, claims,
                                            budget=self._budget, price_of=_price)
            in_the_way = in_flight = False
            for (request, capability), begin in zip(checked, begins, strict=True):
                self._raise_stop(request, begin, len(checked))
                if begin.in_the_way:
                    assert begin.attempt is not None
                    in_the_way = True
                    in_flight = self._clear(request, capability, begin.attempt) or in_flight
            if not in_the_way:
                return begins
            if in_flight:
                time.sleep(delay)
                delay = min(delay * 1.5, 0.5)

    def _raise_stop(self, request: CallRequest, begin: Begin, wave: int) -> None:
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
                "stops here, before this call or any later one is sent", identity=where,
                committed_digest=begin.slot.digest, digest=request.digest)
        if begin.repeat is not None:
            raise repeat_denied(request, begin.repeat)
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
            whole = f"; the wave of {wave} calls is stopped whole, none sent" if wave > 1 \
                else ""
            raise BudgetExceeded(f"call at {where}: {begin.over_budget}{whole}",
                                 identity=where)

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
                return False  # committed, abandoned or marked meanwhile: claim again
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


def repeat_denied(request: CallRequest, paid: PaidAt) -> SemanticRepeatDenied:
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

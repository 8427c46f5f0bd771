"""The broker chain for one capability call, one function for every caller.

grants → schema → digest → runtime rule (replay / divergence) → ledger →
budget → attempt claim (durable before dispatch) → provider → commit.
Each step fails closed. The embedded pipeline and the Celery capability
worker both call ``Broker.dispatch``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from broker.catalog import Capability, lookup
from broker.envelope import Envelope
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    BudgetExceeded,
    CapabilityDenied,
    CapabilityError,
    ReplayDivergence,
    SafetyStop,
    SemanticRepeatDenied,
    SlotConflict,
    StoreUnavailable,
    error_from_json,
)
from broker.identity import Identity, payload_digest
from broker.ledger import Ledger, LedgerAction, ledger_action
from broker.owner import current_owner, owner_alive
from broker.providers import CallContext, Provider, idempotency_key
from broker.records import AttemptRecord, AttemptStatus, SlotRecord
from broker.rule import Decision, decide
from broker.settings import LedgerPolicy, Settings
from broker.store import RunStore

log = logging.getLogger("revise.broker")


class Outcome(StrEnum):
    EXECUTED = "executed"
    REPLAYED = "replayed"
    FAILED = "failed"
    DIVERGED = "diverged"
    DENIED = "denied"
    STOPPED = "stopped"


@dataclass(frozen=True)
class CallRequest:
    run_id: str
    revision: int
    identity: Identity
    capability: str
    payload: Any
    fingerprint: str

    def to_wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "revision": self.revision,
                "identity": str(self.identity), "capability": self.capability,
                "payload": self.payload, "fingerprint": self.fingerprint}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> CallRequest:
        return cls(data["run_id"], int(data["revision"]), Identity.parse(data["identity"]),
                   data["capability"], data["payload"], data["fingerprint"])


@dataclass(frozen=True)
class CallReport:
    identity: Identity
    capability: str
    outcome: Outcome
    result: Any = None
    error: dict[str, Any] | None = None
    stop: SafetyStop | None = None
    attempted: bool = False  # reached the provider (a paid dispatch attempt)
    cost: float = 0.0
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {**self.identity.to_json(), "capability": self.capability,
                "outcome": str(self.outcome)}

    def to_wire(self) -> dict[str, Any]:
        """JSON for a report that crosses processes (a Celery capability task's answer)."""
        return {"identity": str(self.identity), "capability": self.capability,
                "outcome": str(self.outcome), "result": self.result, "error": self.error,
                "stop": None if self.stop is None else self.stop.to_json(),
                "attempted": self.attempted, "cost": self.cost,
                "warnings": list(self.warnings)}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> CallReport:
        stop = data.get("stop")
        rebuilt = error_from_json(stop) if stop else None
        return cls(Identity.parse(data["identity"]), data["capability"],
                   Outcome(data["outcome"]), data.get("result"), data.get("error"),
                   rebuilt if isinstance(rebuilt, SafetyStop) else None,
                   bool(data.get("attempted")), float(data.get("cost") or 0.0),
                   tuple(data.get("warnings") or ()))



class Broker:
    def __init__(self, *, store: RunStore, ledger: Ledger, provider: Provider,
                 envelope: Envelope, settings: Settings, owner: str | None = None) -> None:
        self.store = store
        self.ledger = ledger
        self.provider = provider
        self.envelope = envelope
        self.settings = settings
        self._owner = owner
        self._budget_lock = threading.Lock()

    @property
    def owner(self) -> str:
        return self._owner or current_owner()

    @property
    def ledger_policy(self) -> LedgerPolicy:
        return self.envelope.ledger_policy or self.settings.ledger_policy

    # ---- the chain ------------------------------------------------------------------------

    def dispatch(self, request: CallRequest) -> CallReport:
        try:
            return self._dispatch(request)
        except SafetyStop as stop:
            outcome = {ReplayDivergence: Outcome.DIVERGED, SlotConflict: Outcome.DIVERGED,
                       CapabilityDenied: Outcome.DENIED, BudgetExceeded: Outcome.DENIED,
                       SemanticRepeatDenied: Outcome.DENIED}.get(type(stop), Outcome.STOPPED)
            self._event(request, "call_stopped", stop.message, code=stop.code)
            return CallReport(request.identity, request.capability, outcome, stop=stop,
                              error=stop.to_json())

    def _dispatch(self, request: CallRequest) -> CallReport:
        capability = self._authorize(request)
        digest = payload_digest(request.payload)
        replay = self._replay_or_diverge(request, digest)
        if replay is not None:
            return replay
        warnings = self._check_ledger(request, capability, digest)
        with self._budget_lock:
            self._check_budget(request, capability)
            attempt = self._claim(request, capability, digest)
        if attempt is None:  # a concurrent duplicate committed while we waited
            replay = self._replay_or_diverge(request, digest)
            if replay is not None:
                return replay
            raise AttemptInFlight(f"call at {request.identity} is still in flight elsewhere",
                                  identity=str(request.identity))
        return self._execute(request, capability, digest, attempt, warnings)

    def _authorize(self, request: CallRequest) -> Capability:
        capability = lookup(request.capability)
        if capability.name not in self.envelope.grants:
            raise CapabilityDenied(
                f"{capability.name} is not granted by the envelope; add it to `grants`",
                identity=str(request.identity), capability=capability.name)
        if not capability.production and not self.envelope.dry_run:
            raise CapabilityDenied(
                f"{capability.name} is catalog-only and has no production provider; run with "
                "an envelope that sets dry_run: true to author against it",
                identity=str(request.identity), capability=capability.name)
        if (capability.name in self.envelope.approvals_required
                and capability.name not in self.envelope.approvals):
            raise CapabilityDenied(
                f"{capability.name} requires an approval the envelope does not carry; add it "
                "to `approvals` once approved", identity=str(request.identity),
                capability=capability.name)
        try:
            capability.validate_payload(request.payload)
        except CapabilityDenied as exc:
            raise CapabilityDenied(exc.message, identity=str(request.identity),
                                   capability=capability.name) from None
        return capability

    def _replay_or_diverge(self, request: CallRequest, digest: str) -> CallReport | None:
        slot = self.store.get_slot(request.run_id, request.identity)
        decision = decide(slot, request.capability, digest)
        if decision is Decision.EXECUTE:
            return None
        assert slot is not None
        if decision is Decision.DIVERGE:
            what = "capability" if slot.capability != request.capability else "payload"
            raise ReplayDivergence(
                f"{request.identity} is committed with another {what}"
                " and cannot change; the run stops before any new effect. Keep the committed "
                "payload, or add a new call for new work", identity=str(request.identity),
                committed_digest=slot.digest, digest=digest)
        return CallReport(request.identity, request.capability, Outcome.REPLAYED,
                          result=slot.result)

    def _check_ledger(self, request: CallRequest, capability: Capability,
                      digest: str) -> tuple[str, ...]:
        action = ledger_action(self.ledger_policy, capability)
        if action is LedgerAction.NONE:
            return ()
        ident = request.identity
        if not self.ledger.seen(request.run_id, ident.site, ident.path, digest, request.revision):
            return ()
        message = (f"semantic repeat at {ident}: site {ident.site} path {list(ident.path)} "
                   f"already paid for this exact {capability.name} payload")
        if action is LedgerAction.DENY:
            raise SemanticRepeatDenied(
                message + "; denied before dispatch. Change the payload, or set the ledger "
                "policy to warn if a second take is intended", identity=str(ident))
        self._event(request, "semantic_repeat", message)
        return (message,)

    def _check_budget(self, request: CallRequest, capability: Capability) -> None:
        budget = self.envelope.budget
        if budget.max_calls is None and budget.max_cost is None:
            return
        attempts = self.store.list_attempts(request.run_id)
        spent = sum(lookup(a.capability).unit_price for a in attempts)
        if budget.max_calls is not None and len(attempts) + 1 > budget.max_calls:
            raise BudgetExceeded(
                f"call at {request.identity} would be provider call {len(attempts) + 1}; the "
                f"envelope allows {budget.max_calls}. Raise budget.max_calls or do less",
                identity=str(request.identity))
        if budget.max_cost is not None and spent + capability.unit_price > budget.max_cost:
            raise BudgetExceeded(
                f"call at {request.identity} would bring spend to "
                f"{spent + capability.unit_price:.4f}; the envelope allows {budget.max_cost}",
                identity=str(request.identity))

    def _claim(self, request: CallRequest, capability: Capability,
               digest: str) -> AttemptRecord | None:
        key = idempotency_key(request.run_id, str(request.identity))
        deadline = time.monotonic() + self.settings.attempt_lease_seconds
        while True:
            claim = self.store.claim_attempt(request.run_id, request.identity, capability.name,
                                             digest, request.revision, self.owner, key)
            if claim.claimed:
                return claim.attempt
            existing = claim.attempt
            if existing.status in (AttemptStatus.SUCCEEDED, AttemptStatus.RESOLVED):
                return None  # a duplicate delivery lost the race: replay the commit
            if existing.status is AttemptStatus.PENDING and self._in_flight(existing):
                if time.monotonic() > deadline:
                    existing = self._mark_unresolved(existing)
                else:
                    time.sleep(0.05)  # a duplicate delivery: wait for its commit, then replay
                    if self.store.get_slot(request.run_id, request.identity) is not None:
                        return None
                    continue
            if existing.status is AttemptStatus.PENDING:
                existing = self._mark_unresolved(existing)
            if capability.side_effecting:
                raise AttemptUnresolved(
                    f"{request.identity} has an unresolved attempt (#{existing.number}, owner "
                    f"{existing.owner}): the provider may or may not have completed it. Resolve "
                    f"it with `revise reconcile {request.run_id} '{request.identity}' --result "
                    "FILE` or `--abandon`", identity=str(request.identity),
                    attempt_id=existing.id)
            # Read-only capability: a repeat costs budget, not a duplicate artifact.
            self.store.resolve_attempt(existing.id, AttemptStatus.ABANDONED, operator="revise",
                                       reason="read-only capability: auto-abandoned for retry")

    def _in_flight(self, attempt: AttemptRecord) -> bool:
        alive = owner_alive(attempt.owner)
        if alive is not None:
            return alive
        age = time.time() - attempt.heartbeat_at.timestamp()
        return age < self.settings.attempt_lease_seconds

    def _mark_unresolved(self, attempt: AttemptRecord) -> AttemptRecord:
        self.store.resolve_attempt(attempt.id, AttemptStatus.UNRESOLVED, operator="revise",
                                   reason="owner is gone and the attempt never committed")
        self.store.add_event(attempt.run_id, "attempt_unresolved",
                             f"attempt #{attempt.number} at {attempt.identity} is unresolved",
                             identity=attempt.identity, revision=attempt.revision)
        return replace(attempt, status=AttemptStatus.UNRESOLVED)

    def _execute(self, request: CallRequest, capability: Capability, digest: str,
                 attempt: AttemptRecord, warnings: tuple[str, ...]) -> CallReport:
        call = CallContext(request.run_id, str(request.identity),
                           attempt.idempotency_key or "")
        with _Heartbeat(self.store, attempt.id, self.settings.attempt_lease_seconds / 3):
            try:
                answer = self.provider.execute(capability, request.payload, call)
            except CapabilityError as exc:
                error = {**exc.to_json(), "identity": str(request.identity),
                         "status": exc.fields.get("status"),
                         "code": exc.fields.get("provider_code", exc.code)}
                self.store.fail_attempt(attempt.id, error)
                return CallReport(request.identity, capability.name, Outcome.FAILED,
                                  error=error, attempted=True, cost=capability.unit_price,
                                  warnings=warnings)
            except Exception as exc:
                # We cannot tell whether the provider completed: fail closed, never retry.
                log.exception("provider failed at %s in run %s", request.identity,
                              request.run_id)
                self._mark_unresolved(attempt)
                raise AttemptUnresolved(
                    f"provider call at {request.identity} ended without an answer ({exc}); it "
                    "may have completed. Resolve it with `revise reconcile`",
                    identity=str(request.identity), attempt_id=attempt.id) from None
        slot = SlotRecord(run_id=request.run_id, identity=request.identity,
                          capability=capability.name, digest=digest,
                          fingerprint=request.fingerprint, result=answer.result,
                          usage=answer.usage, cost=answer.cost, revision=request.revision)
        try:
            stored = self.store.commit(slot, attempt.id)
        except SlotConflict as exc:
            raise ReplayDivergence(exc.message, identity=str(request.identity)) from None
        self.ledger.record(stored)
        return CallReport(request.identity, capability.name, Outcome.EXECUTED,
                          result=stored.result, attempted=True, cost=answer.cost,
                          warnings=warnings)

    def _event(self, request: CallRequest, kind: str, message: str, **data: Any) -> None:
        try:
            self.store.add_event(request.run_id, kind, message, revision=request.revision,
                                 identity=request.identity, data=data or None)
        except StoreUnavailable:
            log.warning("could not record event %s for %s: store unavailable", kind,
                        request.identity)


class _Heartbeat:
    """Keeps a long provider call's attempt fresh so it is not taken for a dead one."""

    def __init__(self, store: RunStore, attempt_id: int, interval: float) -> None:
        self._store = store
        self._attempt_id = attempt_id
        self._interval = max(interval, 0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._store.heartbeat_attempt(self._attempt_id)
            except StoreUnavailable:
                log.warning("heartbeat failed for attempt %s", self._attempt_id)

    def __enter__(self) -> _Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()

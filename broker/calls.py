"""One call on its way to the provider, and its answer (pure value objects).

``CallRequest`` is a call the host decided is new work, with its payload normalized;
the side that asks claims it (``broker.claim``), which makes it a ``ClaimedCall``: a
durable pending attempt plus its payload, all of it in the run store, so a broker
worker on any host executes it from the store alone. ``CallReport`` is the answer the
asking side reads back. None of them crosses a queue: a capability task names
attempts by id (``workers.messages.ExecuteCalls``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.errors import (
    BudgetExceeded,
    CapabilityDenied,
    ReplayDivergence,
    SafetyStop,
    SemanticRepeatDenied,
    TakeNotApproved,
)
from broker.identity import Identity
from broker.records import AttemptRecord


class Outcome(StrEnum):
    EXECUTED = "executed"  # the provider answered and the result is committed
    REPLAYED = "replayed"  # served from a committed slot, no provider call
    FAILED = "failed"  # the provider rejected the call (a paid attempt)
    DIVERGED = "diverged"  # a committed identity with another payload: the run stops
    DENIED = "denied"  # grants, budget or the paid-payload ledger said no
    STOPPED = "stopped"  # another safety stop (unresolved attempt, store outage, ...)


@dataclass(frozen=True)
class CallRequest:
    run_id: str
    revision: int
    identity: Identity
    capability: str
    payload: Any  # normalized by the capability's schema
    digest: str  # call_digest(payload, take)
    fingerprint: str
    take: int = 1
    chain_fingerprint: str = ""
    line: int | None = None


@dataclass(frozen=True)
class ClaimedCall:
    """A call claimed for execution: its pending attempt (which carries the run, the
    identity, the capability, the digest, the take, the idempotency key and the slot's
    call facts) and its normalized payload (the blob under the attempt's digest)."""

    attempt: AttemptRecord
    payload: Any


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
    committed_by: int | None = None  # the revision whose slot this result is


@dataclass(frozen=True)
class ClaimedWave:
    """A wave after its claim transaction: what the claim already answered (replays,
    this revision's failed calls, or the one stop of a wave that claimed nothing) and the
    calls it claimed, each with its request, for an executor to run."""

    answered: tuple[CallReport, ...]
    claimed: tuple[tuple[CallRequest, ClaimedCall], ...] = ()


_OUTCOME_OF_STOP: dict[type, Outcome] = {
    ReplayDivergence: Outcome.DIVERGED, CapabilityDenied: Outcome.DENIED,
    BudgetExceeded: Outcome.DENIED, SemanticRepeatDenied: Outcome.DENIED,
    TakeNotApproved: Outcome.DENIED,
}


def failed_report(identity: Identity, capability: str, error: dict[str, Any],
                  price: float) -> CallReport:
    """A provider's failure as its call's answer: a paid attempt, costing ``price`` (the
    capability's) when the provider may have charged for it."""
    return CallReport(identity, capability, Outcome.FAILED, error=error, attempted=True,
                      cost=price if error.get("charged") == "maybe" else 0.0)


def stop_report(identity: Identity, capability: str, stop: SafetyStop) -> CallReport:
    """The report of a call a safety stop ended (the revision stops with it)."""
    outcome = _OUTCOME_OF_STOP.get(type(stop), Outcome.STOPPED)
    return CallReport(identity, capability, outcome, stop=stop, error=stop.to_json())

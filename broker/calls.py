"""One call on its way to the broker, and the broker's answer (pure value objects).

``CallRequest`` is what the host sends for a call it decided is new work;
``CallReport`` is what comes back. Each has exactly one wire form (JSON, for a
Celery capability task); the identity travels as its text form.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.errors import SafetyStop, error_from_json
from broker.identity import Identity


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

    def to_wire(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "revision": self.revision,
                "identity": str(self.identity), "capability": self.capability,
                "payload": self.payload, "digest": self.digest,
                "fingerprint": self.fingerprint, "take": self.take,
                "chain_fingerprint": self.chain_fingerprint, "line": self.line}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> CallRequest:
        return cls(run_id=str(data["run_id"]), revision=int(data["revision"]),
                   identity=Identity.parse(data["identity"]),
                   capability=str(data["capability"]), payload=data["payload"],
                   digest=str(data["digest"]), fingerprint=str(data["fingerprint"]),
                   take=int(data.get("take") or 1),
                   chain_fingerprint=str(data.get("chain_fingerprint") or ""),
                   line=data.get("line"))


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

    def to_wire(self) -> dict[str, Any]:
        return {"identity": str(self.identity), "capability": self.capability,
                "outcome": str(self.outcome), "result": self.result, "error": self.error,
                "stop": None if self.stop is None else self.stop.to_json(),
                "attempted": self.attempted, "cost": self.cost,
                "warnings": list(self.warnings), "committed_by": self.committed_by}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> CallReport:
        stop = data.get("stop")
        rebuilt = error_from_json(stop) if stop else None
        return cls(Identity.parse(data["identity"]), data["capability"],
                   Outcome(data["outcome"]), data.get("result"), data.get("error"),
                   rebuilt if isinstance(rebuilt, SafetyStop) else None,
                   bool(data.get("attempted")), float(data.get("cost") or 0.0),
                   tuple(data.get("warnings") or ()), data.get("committed_by"))

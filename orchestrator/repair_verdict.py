"""The verdict on one repair round and the loop's result, as values (what the CLI prints,
what the model's next round is built from)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.errors import ReviseError
from orchestrator.checker import Violation
from orchestrator.gate import Counterexample
from orchestrator.repair_context import CallExpression, CallShortfall, SourceLine

# Runtime stops the model can fix, by error type, with the name the loop reports.
RUNTIME_REFUSALS = {"ReplayDivergence": "divergence", "SemanticRepeatDenied": "ledger",
                    "OrphanStop": "orphans", "BudgetExceeded": "budget",
                    "CapabilityDenied": "denied"}


def runtime_refusal(report: Mapping[str, Any]) -> str | None:
    """The kind of runtime refusal that ended a candidate's run, or None."""
    if report.get("status") == "succeeded":
        return None
    return RUNTIME_REFUSALS.get(str((report.get("error") or {}).get("type")))


STAGES = ("extract", "decode", "check", "gate", "call_count")

@dataclass(frozen=True)
class RoundRun:
    """What running an admissible candidate did."""

    revision: int | None
    status: str  # succeeded | failed | stopped
    spend: float
    executed: int
    replayed: int
    refusal: str | None  # divergence | ledger | orphans | budget | denied (fixable stops)
    error: dict[str, Any] | None

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> RoundRun:
        calls = report.get("calls") or {}
        return cls(revision=report.get("revision"), status=str(report.get("status")),
                   spend=float(report.get("spend") or 0.0),
                   executed=int(calls.get("executed") or 0),
                   replayed=int(calls.get("replayed") or 0), refusal=runtime_refusal(report),
                   error=report.get("error"))

    def to_json(self) -> dict[str, Any]:
        return {"revision": self.revision, "status": self.status, "spend": self.spend,
                "executed": self.executed, "replayed": self.replayed,
                "refusal": self.refusal, "error": self.error_json()}

    def error_json(self) -> dict[str, Any] | None:
        """The run's error as a round shows it (the run JSON has all of its fields)."""
        return None if self.error is None else {
            k: self.error.get(k) for k in ("type", "code", "message", "identity")}


@dataclass(frozen=True)
class AttemptFeedback:
    """The verdict on one round; ``message`` is exactly what the model was told next."""

    attempt: int
    accepted: bool  # by the checker, the gate and the call-count guard
    refused_by: tuple[str, ...] = ()  # stages that refused it, in STAGES order
    violations: tuple[Violation, ...] = ()
    counterexamples: tuple[Counterexample, ...] = ()
    # What the call-count guard compared: the capability calls the candidate can make at
    # most, and the failed script (``counted`` "calls", their static bounds), or, when a
    # bound is unknown, their call expressions (``counted`` "call expressions").
    calls: int | None = None
    required_calls: int = 0
    message: str = ""
    candidate: str | None = None
    dropped: tuple[CallExpression, ...] = ()  # counting expressions: the ones it lacks
    run: RoundRun | None = None  # when the accepted candidate was executed
    refusals: tuple[ReviseError, ...] = ()  # one typed error per stage in ``refused_by``
    counted: str = "calls"  # calls | call expressions
    short: tuple[CallShortfall, ...] = ()  # counting calls: the capabilities it has fewer of
    unbounded: tuple[SourceLine, ...] = ()  # counting expressions: the calls with no bound

    @property
    def stage(self) -> str:
        """The first stage that refused the candidate, "runtime" for a runtime refusal,
        the run's status when it ran, else "accepted"."""
        if self.refused_by:
            return self.refused_by[0]
        if self.run is not None:
            return "runtime" if self.run.refusal else self.run.status
        return "accepted"

    @property
    def spend(self) -> float:
        """What this round cost at the provider (0 for a refused candidate)."""
        return self.run.spend if self.run is not None else 0.0

    @property
    def error(self) -> dict[str, Any] | None:
        """Why the round did not end the loop well: the first stage's refusal, else the
        error its run ended with (None: accepted, and it ran well or did not run)."""
        if self.refusals:
            return self.refusals[0].to_json()
        return None if self.run is None else self.run.error_json()

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "accepted": self.accepted, "stage": self.stage,
                "refused_by": list(self.refused_by),
                "violations": [v.to_json() for v in self.violations],
                "counterexamples": [c.to_json() for c in self.counterexamples],
                "calls": self.calls, "required_calls": self.required_calls,
                "counted": self.counted, "short": [s.to_json() for s in self.short],
                "unbounded": [{"line": u.line, "where": u.where} for u in self.unbounded],
                "dropped": [{"capability": c.capability, "line": c.line, "text": c.text}
                            for c in self.dropped],
                "spend": self.spend, "error": self.error,
                "errors": [e.to_json() for e in self.refusals],
                "run": None if self.run is None else self.run.to_json(),
                "feedback": self.message}


@dataclass(frozen=True)
class RepairResult:
    accepted: bool  # some candidate passed the checker, the gate and the call-count guard
    candidate: str | None  # the last such candidate
    attempts: list[AttemptFeedback] = field(default_factory=list)
    run_id: str = ""
    failed_revision: int | None = None
    frozen_sites: int = 0
    run: dict[str, Any] | None = None  # the run JSON of the last executed candidate
    endpoint_error: dict[str, Any] | None = None  # the model endpoint gave up mid-loop
    max_rounds: int = 0

    @property
    def rewrites(self) -> int:
        return len(self.attempts)

    @property
    def spend(self) -> float:
        return round(sum(a.spend for a in self.attempts), 6)

    @property
    def error(self) -> dict[str, Any] | None:
        """Why no repaired run came out: the endpoint's error, the last round's refusal, or
        the error the last candidate's run ended with; None when it was repaired."""
        if self.endpoint_error is not None:
            return self.endpoint_error
        if self.outcome in ("accepted", "succeeded") or not self.attempts:
            return None
        return self.attempts[-1].error

    @property
    def outcome(self) -> str:
        """endpoint_failed | no_candidate | accepted (not executed) | succeeded | failed."""
        if self.endpoint_error is not None:
            return "endpoint_failed"
        if not self.accepted:
            return "no_candidate"
        if self.run is None:
            return "accepted"
        return "succeeded" if self.run.get("status") == "succeeded" else "failed"

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "outcome": self.outcome, "accepted": self.accepted,
                "rewrites": self.rewrites, "rounds": self.rewrites,
                "max_rounds": self.max_rounds, "spend": self.spend,
                "failed_revision": self.failed_revision, "frozen_sites": self.frozen_sites,
                "candidate": self.candidate, "error": self.error,
                "endpoint_error": self.endpoint_error,
                "attempts": [a.to_json() for a in self.attempts], "run": self.run}

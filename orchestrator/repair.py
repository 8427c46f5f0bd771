"""The repair loop (paper V-f): rounds of candidates until one succeeds or the budget ends.

``repair_dynamic_source`` loads the run's committed prefix and its last
failure (``orchestrator.repair_context``), asks the model for a repaired
script, and judges each candidate before anything runs:

    extract → decode → checker (R00-R12) → gate against the frozen prefix
            → call-count guard (no fewer call expressions than the failed script)

A refused candidate's counterexamples go back to the model in the next round.
With ``execute`` (``revise repair --execute``), an admissible candidate runs on
the same run id; when the runtime stops it on a refusal the model can fix (a
replay divergence, a ledger denial, an orphan stop, the budget, a denied
capability), that counterexample goes back as the next round, within the same
budget of ``max_attempts`` rounds. Any other end of a run (success, a provider
failure, an unresolved attempt) ends the loop. Without ``execute`` the loop
stops at the first admissible candidate; this module never starts a sandbox
itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.errors import InputError
from broker.store import RunStore
from orchestrator.checker import Violation, check
from orchestrator.gate import Counterexample, check_gate
from orchestrator.inputs import MISSING
from orchestrator.models import ModelBackend, ModelEndpointError, extract_script
from orchestrator.repair_context import (
    CallExpression,
    RepairContext,
    SourceLine,
    call_expressions,
    load_context,
    parsed_sites,
)
from orchestrator.repair_feedback import refusal_message, runtime_message, runtime_refusal
from orchestrator.repair_prompt import initial_messages
from orchestrator.source import decode_source

__all__ = ["STAGES", "AttemptFeedback", "RepairContext", "RepairResult", "RoundRun",
           "SourceLine", "judge", "load_context", "repair_dynamic_source"]

STAGES = ("extract", "decode", "check", "gate", "call_count")

# What running a candidate returns: its run JSON (``RunReport.to_json()``).
Execute = Callable[[str], Mapping[str, Any]]


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
                "refusal": self.refusal,
                "error": None if self.error is None else {
                    k: self.error.get(k) for k in ("type", "message", "identity")}}


@dataclass(frozen=True)
class AttemptFeedback:
    """The verdict on one round; ``message`` is exactly what the model was told next."""

    attempt: int
    accepted: bool  # by the checker, the gate and the call-count guard
    refused_by: tuple[str, ...] = ()  # stages that refused it, in STAGES order
    violations: tuple[Violation, ...] = ()
    counterexamples: tuple[Counterexample, ...] = ()
    calls: int | None = None  # capability call expressions in the candidate
    required_calls: int = 0
    message: str = ""
    candidate: str | None = None
    dropped: tuple[CallExpression, ...] = ()  # the failed script's expressions it lacks
    run: RoundRun | None = None  # when the accepted candidate was executed

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

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "accepted": self.accepted, "stage": self.stage,
                "refused_by": list(self.refused_by),
                "violations": [v.to_json() for v in self.violations],
                "counterexamples": [c.to_json() for c in self.counterexamples],
                "calls": self.calls, "required_calls": self.required_calls,
                "dropped": [{"capability": c.capability, "line": c.line, "text": c.text}
                            for c in self.dropped],
                "spend": self.spend,
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
                "candidate": self.candidate, "endpoint_error": self.endpoint_error,
                "attempts": [a.to_json() for a in self.attempts], "run": self.run}


# ---- judging one candidate -----------------------------------------------------------------


def judge(output: str, context: RepairContext, *, attempt: int,
          capabilities: frozenset[str], rounds: int = 1) -> AttemptFeedback:
    """Run every stage that can run on the model's answer and collect all refusals."""
    script = extract_script(output)
    base = AttemptFeedback(attempt=attempt, accepted=False,
                           required_calls=context.required_calls)
    if not script:
        return _refused(context, base, ("extract",), candidate=None, rounds=rounds)
    try:
        text = decode_source(script).text
    except InputError as exc:
        return _refused(context, base, ("decode",), candidate=script, detail=exc.message,
                        rounds=rounds)
    report = check(text, capabilities=capabilities)
    refused: list[str] = [] if report.valid else ["check"]
    errors = tuple(v for v in report.violations if v.severity == "error")
    counterexamples: tuple[Counterexample, ...] = ()
    calls: int | None = None
    dropped: tuple[CallExpression, ...] = ()
    # A candidate over the R00 limits or unparsable is the checker's alone: never parse it.
    sites = None if any(v.rule == "R00" for v in errors) else parsed_sites(text)
    if sites is not None:
        gate = check_gate(context.frozen, sites, relocation=context.relocation)
        counterexamples = gate.counterexamples
        if not gate.accepted:
            refused.append("gate")
        expressions = call_expressions(text, sites)
        calls = len(expressions)
        if calls < context.required_calls:
            refused.append("call_count")
            dropped = _dropped(context.required, expressions)
    if refused:
        return _refused(context, base, tuple(refused), candidate=text, violations=errors,
                        counterexamples=counterexamples, calls=calls, dropped=dropped,
                        rounds=rounds)
    return replace(base, accepted=True, calls=calls, candidate=text,
                   violations=report.violations)


def _dropped(required: tuple[CallExpression, ...], found: tuple[CallExpression, ...]
             ) -> tuple[CallExpression, ...]:
    """The failed script's call expressions the candidate lacks (by expression, counted)."""
    left = [c.fingerprint for c in found]
    missing = []
    for expression in required:
        if expression.fingerprint in left:
            left.remove(expression.fingerprint)
        else:
            missing.append(expression)
    return tuple(missing)


def _refused(context: RepairContext, base: AttemptFeedback, refused_by: tuple[str, ...], *,
             candidate: str | None, detail: str = "", violations: tuple[Violation, ...] = (),
             counterexamples: tuple[Counterexample, ...] = (), calls: int | None = None,
             dropped: tuple[CallExpression, ...] = (), rounds: int = 1) -> AttemptFeedback:
    feedback = replace(base, refused_by=refused_by, violations=violations,
                       counterexamples=counterexamples, calls=calls, candidate=candidate,
                       dropped=dropped)
    message = refusal_message(feedback, context, candidate or "", detail=detail, rounds=rounds)
    return replace(feedback, message=message)


# ---- the loop ------------------------------------------------------------------------------


def repair_dynamic_source(*, store: RunStore, run_id: str, model: ModelBackend,
                          max_attempts: int = 3,
                          catalog: Mapping[str, Capability] = CATALOG,
                          grants: Iterable[str] | None = None,
                          args: Any = MISSING, relocation: str = "remap",
                          execute: Execute | None = None,
                          runtime_feedback: bool = True) -> RepairResult:
    """At most ``max_attempts`` rounds; see the module docstring.

    ``grants`` restricts the capability names the checker and the prompt allow (default:
    the whole catalog); ``args`` (the run's input, shown to the model) defaults to the
    args stored with the run. ``execute(candidate)`` runs an admissible candidate on the
    run and returns its run JSON; ``runtime_feedback=False`` ends the loop at the first
    executed candidate whatever its run did (for comparison in the benchmark).
    """
    if max_attempts < 1:
        raise InputError(f"max_attempts is {max_attempts}; allow at least one rewrite")
    context = load_context(store, run_id, args=args, relocation=relocation)
    names = frozenset(catalog) if grants is None else frozenset(grants) & frozenset(catalog)
    messages = initial_messages(context, catalog, grants, rounds=max_attempts)
    loop = _Loop(store, context, max_attempts, catalog)
    for attempt in range(1, max_attempts + 1):
        try:
            output = model.complete(messages, purpose="repair")
        except ModelEndpointError as exc:
            return loop.result(endpoint_error=exc.to_json())
        verdict = judge(output, loop.context, attempt=attempt, capabilities=names,
                        rounds=max_attempts)
        if verdict.accepted and execute is not None:
            verdict = loop.ran(verdict, execute(verdict.candidate or ""))
        loop.record(verdict)
        if verdict.accepted and not loop.again(verdict, runtime_feedback):
            return loop.result()
        messages = [*messages, {"role": "assistant", "content": output},
                    {"role": "user", "content": verdict.message}]
    return loop.result()


class _Loop:
    """The loop's state: the context the next candidate is judged against, the rounds."""

    def __init__(self, store: RunStore, context: RepairContext, rounds: int,
                 catalog: Mapping[str, Capability]) -> None:
        self.store = store
        self.context = context
        self.rounds = rounds
        self.catalog = catalog
        self.attempts: list[AttemptFeedback] = []
        self.report: dict[str, Any] | None = None

    def ran(self, verdict: AttemptFeedback, report: Mapping[str, Any]) -> AttemptFeedback:
        """Attach the run; for a runtime refusal, the counterexample for the next round."""
        self.report = dict(report)
        run = RoundRun.of(report)
        verdict = replace(verdict, run=run)
        if run.refusal is None:
            return verdict
        before = {str(c.identity) for c in self.context.committed}
        judged = self.context
        self.context = load_context(self.store, judged.run_id, args=judged.args,
                                    relocation=judged.relocation,
                                    failed_revision=judged.failed.revision)
        new = tuple(c for c in self.context.committed if str(c.identity) not in before)
        message = runtime_message(verdict, judged, verdict.candidate or "", report,
                                  rounds=self.rounds, catalog=self.catalog, new_commits=new)
        return replace(verdict, message=message)

    def again(self, verdict: AttemptFeedback, runtime_feedback: bool) -> bool:
        """Another round after an accepted candidate? Only for a fixable runtime stop."""
        return bool(runtime_feedback and verdict.run is not None and verdict.run.refusal)

    def record(self, verdict: AttemptFeedback) -> None:
        """Audit every round on the run (refused candidates never reach a revision)."""
        self.attempts.append(verdict)
        if verdict.run is not None and verdict.run.refusal:
            kind = "repair_runtime_refused"
            text = (f"repair candidate {verdict.attempt} ran as revision "
                    f"{verdict.run.revision} and was stopped ({verdict.run.refusal})")
        elif verdict.accepted:
            kind = "repair_accepted"
            text = f"repair candidate {verdict.attempt} accepted"
        else:
            kind = "repair_refused"
            text = (f"repair candidate {verdict.attempt} refused by "
                    f"{', '.join(verdict.refused_by)}")
        self.store.add_event(self.context.run_id, kind, text, data={
            k: v for k, v in verdict.to_json().items() if k != "feedback"})

    def result(self, endpoint_error: dict[str, Any] | None = None) -> RepairResult:
        accepted = [a for a in self.attempts if a.accepted]
        return RepairResult(accepted=bool(accepted),
                            candidate=accepted[-1].candidate if accepted else None,
                            attempts=self.attempts, run_id=self.context.run_id,
                            failed_revision=self.context.failed.revision,
                            frozen_sites=len(self.context.frozen), run=self.report,
                            endpoint_error=endpoint_error, max_rounds=self.rounds)

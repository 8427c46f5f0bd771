"""The repair loop (paper V-f): rounds of candidates until one succeeds or the budget ends.

``repair_dynamic_source`` loads the run's committed prefix and its last
failure (``orchestrator.repair_context``), asks the model for a repaired
script, and judges each candidate before anything runs:

    extract → decode → checker (R00-R12) → gate against the frozen prefix
            → call-count guard (no fewer capability calls than the failed script
              can make, by their static bounds; see ``count_calls``)

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
from dataclasses import dataclass, replace
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.errors import AnswerCutOff, InputError, ReviseError
from broker.store import RunStore
from orchestrator.checker import Violation, check
from orchestrator.gate import Counterexample, check_gate
from orchestrator.inputs import MISSING
from orchestrator.models import ModelBackend, ModelEndpointError, extract_script
from orchestrator.refusals import calls_dropped, check_failed, gate_rejected, no_script
from orchestrator.repair_context import (
    CallExpression,
    CallShortfall,
    RepairContext,
    SourceLine,
    bounded_sites,
    call_expressions,
    capability_calls,
    load_context,
    source_line,
    total_calls,
)
from orchestrator.repair_feedback import refusal_message, runtime_message
from orchestrator.repair_prompt import initial_messages
from orchestrator.repair_verdict import STAGES, AttemptFeedback, RepairResult, RoundRun
from orchestrator.sites import Site
from orchestrator.source import decode_source

__all__ = ["STAGES", "AttemptFeedback", "CallCount", "RepairContext", "RepairResult",
           "RoundRun", "SourceLine", "count_calls", "judge", "load_context",
           "repair_dynamic_source"]

# What running a candidate returns: its run JSON (``RunReport.to_json()``).
Execute = Callable[[str], Mapping[str, Any]]


# ---- judging one candidate -----------------------------------------------------------------


def judge(output: str, context: RepairContext, *, attempt: int,
          capabilities: frozenset[str], rounds: int = 1) -> AttemptFeedback:
    """Run every stage that can run on the model's answer and collect all refusals."""
    script = extract_script(output, failed=context.failed.source_text)
    base = _unjudged(context, attempt)
    if not script:
        return _refused(context, base, ("extract",), candidate=None, rounds=rounds,
                        refusals=(no_script(),))
    try:
        text = decode_source(script).text
    except InputError as exc:
        return _refused(context, base, ("decode",), candidate=script, detail=exc.message,
                        rounds=rounds, refusals=(exc,))
    report = check(text, capabilities=capabilities)
    refused: list[str] = [] if report.valid else ["check"]
    errors = tuple(v for v in report.violations if v.severity == "error")
    counterexamples: tuple[Counterexample, ...] = ()
    # A candidate over the R00 limits or unparsable is the checker's alone: never parse it.
    sites = None if any(v.rule == "R00" for v in errors) else bounded_sites(text)
    if sites is not None:
        gate = check_gate(context.frozen, sites, relocation=context.relocation)
        counterexamples = gate.counterexamples
        if not gate.accepted:
            refused.append("gate")
        count = count_calls(context, text, sites)
        base = replace(base, calls=count.calls, required_calls=count.required,
                       counted=count.counted)
        if count.refused:
            refused.append("call_count")
            base = replace(base, short=count.short, dropped=count.dropped,
                           unbounded=count.unbounded)
    if refused:
        return _refused(context, base, tuple(refused), candidate=text, violations=errors,
                        counterexamples=counterexamples, rounds=rounds)
    return replace(base, accepted=True, candidate=text, violations=report.violations)


def _unjudged(context: RepairContext, attempt: int) -> AttemptFeedback:
    """A round before any stage judged it: what the call-count guard will require."""
    required = context.required_at_most
    return AttemptFeedback(attempt=attempt, accepted=False,
                           counted="call expressions" if required is None else "calls",
                           required_calls=context.required_calls if required is None
                           else required)


# ---- the call-count guard ------------------------------------------------------------------


@dataclass(frozen=True)
class CallCount:
    """What the call-count guard compared, and what it found short."""

    counted: str  # "calls" (static bounds) | "call expressions" (a bound is unknown)
    calls: int  # the candidate's
    required: int  # the failed script's
    short: tuple[CallShortfall, ...] = ()  # counting calls and refused: per capability
    dropped: tuple[CallExpression, ...] = ()  # counting expressions and refused
    unbounded: tuple[SourceLine, ...] = ()  # counting expressions: the calls with no bound

    @property
    def refused(self) -> bool:
        return self.calls < self.required


def count_calls(context: RepairContext, text: str, sites: list[Site]) -> CallCount:
    """The call-count guard (pure): the candidate ``text`` (its ``bounded_sites``) must be
    able to make at least as many capability calls as the failed script, overall.

    Calls are counted by their static bounds (``Site.max_calls``, the bounds admission
    holds a revision to): a loop over a literal list of 3 is 3 calls, ``range(4)`` 4, a
    helper reached from two places counts on both, a race decision is no call. So folding
    three literal calls into a loop over three values keeps the count, and shrinking a loop
    of three to one call is refused. The totals are compared, not each capability's (the
    contract: no candidate "that removes capability calls overall"; a repair may move work
    to another, granted, capability, and the gate keeps every committed call); a refusal
    names each capability the candidate has fewer calls of. A bound is an upper bound: a
    branch inside a loop counts as if taken, as a call expression always did.

    When a call of either script has no static bound (a while loop, iteration over the
    run's input: the checker refuses those, but a refused candidate is still counted, and
    a failed script may have been admitted by another checker), the counts cannot be
    compared. The guard then compares call expressions, as it did before bounds were
    known: no fewer in the candidate than in the failed script. That refuses no candidate
    the older guard accepted and accepts none it refused, and its feedback says that it
    counted expressions and which calls have no bound.
    """
    found = capability_calls(text, sites)
    calls, required = total_calls(found), context.required_at_most
    if calls is not None and required is not None:
        have = {c.capability: c.at_most or 0 for c in found}
        short = tuple(CallShortfall(r.capability, have.get(r.capability, 0), r.at_most or 0,
                                    r.expressions)
                      for r in context.required_counts
                      if have.get(r.capability, 0) < (r.at_most or 0))
        return CallCount("calls", calls, required, short=short if calls < required else ())
    expressions = call_expressions(text, sites)
    unbounded = tuple(
        [SourceLine(line, source_line(context.failed.source_text, line))
         for c in context.required_counts for line in c.unbounded]
        + [SourceLine(line, source_line(text, line), "your candidate")
           for c in found for line in c.unbounded])
    count = CallCount("call expressions", len(expressions), context.required_calls,
                      unbounded=unbounded)
    if count.refused:
        count = replace(count, dropped=_dropped(context.required, expressions))
    return count


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
             counterexamples: tuple[Counterexample, ...] = (), rounds: int = 1,
             refusals: tuple[ReviseError, ...] = ()) -> AttemptFeedback:
    """``refusals``: the typed errors of the stages that refused, when they are not the
    checker's, the gate's and the call-count guard's (made here from what they found; the
    guard's count is in ``base``)."""
    lines = (sorted({line for s in base.short for line in s.lines})
             if base.counted == "calls" else [c.line for c in base.dropped])
    stages = {"check": lambda: check_failed(violations),
              "gate": lambda: gate_rejected(counterexamples),
              "call_count": lambda: calls_dropped(base.calls or 0, base.required_calls, lines,
                                                  counted=base.counted, short=base.short)}
    feedback = replace(base, refused_by=refused_by, violations=violations,
                       counterexamples=counterexamples, candidate=candidate,
                       refusals=refusals or tuple(stages[s]() for s in refused_by))
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
        except AnswerCutOff as exc:  # a round refused: the model hears why, and answers again
            output = "(an answer cut off at the output limit)"
            verdict = _refused(loop.context, _unjudged(loop.context, attempt), ("extract",),
                               candidate=None, rounds=max_attempts, refusals=(exc,))
        else:
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

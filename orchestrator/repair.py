"""The repair loop (paper V-f): ask a model for a candidate until one is admissible.

``repair_dynamic_source`` loads the run's committed prefix and its last
failure, asks the model for a repaired script, and judges each candidate
before anything runs:

    extract → decode → checker (R00-R12) → gate against the frozen prefix
            → call-count guard (no fewer capability calls than the failed script)

A refused candidate's structured counterexamples go back to the model in the
next turn. At most ``max_attempts`` candidates are requested. Executing the
accepted candidate is the caller's decision (``revise repair --execute`` or
``revise run`` on the same run id); this module never starts a sandbox.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.errors import InputError
from broker.records import RevisionRecord
from broker.store import RunStore
from orchestrator.checker import Violation, check
from orchestrator.gate import Counterexample, FrozenSite, check_gate, frozen_sites
from orchestrator.models import ModelBackend, extract_script
from orchestrator.repair_prompt import feedback_message, initial_messages
from orchestrator.sites import Site, assign_sites, count_capability_calls
from orchestrator.source import decode_source

STAGES = ("extract", "decode", "check", "gate", "call_count")


@dataclass(frozen=True)
class SourceLine:
    """Where a frozen call sits in a script, with its text (for the prompt)."""

    line: int
    text: str


@dataclass(frozen=True)
class RepairContext:
    """Everything the prompt is built from, read once from the store."""

    run_id: str
    failed: RevisionRecord  # the latest revision that ran (it passed the gate)
    original: RevisionRecord  # the revision that committed the first entry of the prefix
    frozen: dict[str, FrozenSite]
    frozen_lines: dict[str, SourceLine]  # frozen site -> its call in the failed script
    failure: dict[str, Any]  # the failed revision's structured error
    failed_identities: list[dict[str, Any]]
    required_calls: int  # capability calls in the failed script
    args: Any = None
    relocation: str = "remap"  # the gate's relocation setting (settings.relocation)


@dataclass(frozen=True)
class AttemptFeedback:
    """The verdict on one candidate; ``message`` is exactly what the model was told."""

    attempt: int
    accepted: bool
    refused_by: tuple[str, ...] = ()  # stages that refused it, in STAGES order
    violations: tuple[Violation, ...] = ()
    counterexamples: tuple[Counterexample, ...] = ()
    calls: int | None = None  # capability calls in the candidate
    required_calls: int = 0
    message: str = ""
    candidate: str | None = None

    @property
    def stage(self) -> str:
        """The first stage that refused the candidate, or "accepted"."""
        return self.refused_by[0] if self.refused_by else "accepted"

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "accepted": self.accepted, "stage": self.stage,
                "refused_by": list(self.refused_by),
                "violations": [v.to_json() for v in self.violations],
                "counterexamples": [c.to_json() for c in self.counterexamples],
                "calls": self.calls, "required_calls": self.required_calls,
                "feedback": self.message}


@dataclass(frozen=True)
class RepairResult:
    accepted: bool
    candidate: str | None
    attempts: list[AttemptFeedback] = field(default_factory=list)
    run_id: str = ""
    failed_revision: int | None = None
    frozen_sites: int = 0

    @property
    def rewrites(self) -> int:
        return len(self.attempts)

    def to_json(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "accepted": self.accepted, "rewrites": self.rewrites,
                "failed_revision": self.failed_revision, "frozen_sites": self.frozen_sites,
                "candidate": self.candidate, "attempts": [a.to_json() for a in self.attempts]}


# ---- loading the run -----------------------------------------------------------------------


def _ran(revision: RevisionRecord) -> bool:
    """A revision that passed check and gate and reached a sandbox."""
    summary = revision.summary or {}
    return bool((summary.get("gate") or {}).get("accepted")) and summary.get("status") in (
        "succeeded", "failed", "stopped")


def _parsed_sites(text: str) -> list[Site] | None:
    try:
        return assign_sites(ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _sites(text: str) -> list[Site]:
    return _parsed_sites(text) or []


def _lines_of(text: str, sites: Iterable[Site]) -> dict[str, SourceLine]:
    lines = text.split("\n")
    return {s.site: SourceLine(s.line, "\n".join(lines[s.line - 1:s.end_line]).strip())
            for s in sites}


def load_context(store: RunStore, run_id: str, *, args: Any = None,
                 relocation: str = "remap") -> RepairContext:
    revisions = store.list_revisions(run_id)
    if not revisions:
        raise InputError(f"run {run_id!r} has no revisions; run it first with "
                         f"`revise run SCRIPT --run-id {run_id}`", run_id=run_id)
    ran = [r for r in revisions if _ran(r)]
    failed = ran[-1] if ran else revisions[-1]
    if failed.status == "succeeded":
        raise InputError(f"run {run_id!r} succeeded at revision {failed.revision}; there is "
                         "nothing to repair", run_id=run_id)
    slots = store.list_slots(run_id)
    frozen = frozen_sites(slots)
    first = min((s.revision for s in slots), default=failed.revision)
    original = next((r for r in revisions if r.revision == first), failed)
    failed_sites = _sites(failed.source_text)
    where = _lines_of(original.source_text, _sites(original.source_text))
    where.update(_lines_of(failed.source_text, failed_sites))
    summary = failed.summary or {}
    return RepairContext(
        run_id=run_id, failed=failed, original=original, frozen=frozen,
        frozen_lines={name: where[name] for name in frozen if name in where},
        failure=dict(summary.get("error") or {}),
        failed_identities=[i for i in summary.get("identities", [])
                           if i.get("outcome") in ("failed", "diverged", "denied")],
        required_calls=count_capability_calls(failed_sites), args=args,
        relocation=relocation)


# ---- judging one candidate -----------------------------------------------------------------


def judge(output: str, context: RepairContext, *, attempt: int,
          capabilities: frozenset[str]) -> AttemptFeedback:
    """Run every stage that can run on the model's answer and collect all refusals."""
    script = extract_script(output)
    base = {"attempt": attempt, "required_calls": context.required_calls}
    if not script:
        return _refused(context, base, ("extract",), candidate=None)
    try:
        text = decode_source(script).text
    except InputError as exc:
        return _refused(context, base, ("decode",), candidate=script, detail=exc.message)
    report = check(text, capabilities=capabilities)
    refused: list[str] = [] if report.valid else ["check"]
    errors = tuple(v for v in report.violations if v.severity == "error")
    counterexamples: tuple[Counterexample, ...] = ()
    calls: int | None = None
    # A candidate over the R00 limits or unparsable is the checker's alone: never parse it.
    sites = None if any(v.rule == "R00" for v in errors) else _parsed_sites(text)
    if sites is not None:
        gate = check_gate(context.frozen, sites, relocation=context.relocation)
        counterexamples = gate.counterexamples
        if not gate.accepted:
            refused.append("gate")
        calls = count_capability_calls(sites)
        if calls < context.required_calls:
            refused.append("call_count")
    if refused:
        return _refused(context, base, tuple(refused), candidate=text, violations=errors,
                        counterexamples=counterexamples, calls=calls)
    return AttemptFeedback(accepted=True, calls=calls, candidate=text,
                           violations=report.violations, **base)


def _refused(context: RepairContext, base: dict[str, Any], refused_by: tuple[str, ...], *,
             candidate: str | None, detail: str = "", violations: tuple[Violation, ...] = (),
             counterexamples: tuple[Counterexample, ...] = (), calls: int | None = None
             ) -> AttemptFeedback:
    feedback = AttemptFeedback(accepted=False, refused_by=refused_by, violations=violations,
                               counterexamples=counterexamples, calls=calls,
                               candidate=candidate, **base)
    message = feedback_message(feedback, context, candidate or "", detail=detail)
    return AttemptFeedback(**{**feedback.__dict__, "message": message})


# ---- the loop ------------------------------------------------------------------------------


def repair_dynamic_source(*, store: RunStore, run_id: str, model: ModelBackend,
                          max_attempts: int = 3,
                          catalog: Mapping[str, Capability] = CATALOG,
                          grants: Iterable[str] | None = None,
                          args: Any = None, relocation: str = "remap") -> RepairResult:
    """Ask ``model`` for at most ``max_attempts`` candidates; return the first admissible one.

    ``grants`` restricts the capability names the checker and the prompt allow (default:
    the whole catalog); ``args`` (the run's input) is shown to the model when given.
    """
    if max_attempts < 1:
        raise InputError(f"max_attempts is {max_attempts}; allow at least one rewrite")
    context = load_context(store, run_id, args=args, relocation=relocation)
    names = frozenset(catalog) if grants is None else frozenset(grants) & frozenset(catalog)
    messages = initial_messages(context, catalog, grants)
    attempts: list[AttemptFeedback] = []
    for attempt in range(1, max_attempts + 1):
        output = model.complete(messages, purpose="repair")
        verdict = judge(output, context, attempt=attempt, capabilities=names)
        attempts.append(verdict)
        _record(store, context, verdict)
        if verdict.accepted:
            return _result(context, attempts, verdict.candidate)
        messages = [*messages, {"role": "assistant", "content": output},
                    {"role": "user", "content": verdict.message}]
    return _result(context, attempts, None)


def _result(context: RepairContext, attempts: list[AttemptFeedback],
            candidate: str | None) -> RepairResult:
    return RepairResult(accepted=candidate is not None, candidate=candidate, attempts=attempts,
                        run_id=context.run_id, failed_revision=context.failed.revision,
                        frozen_sites=len(context.frozen))


def _record(store: RunStore, context: RepairContext, verdict: AttemptFeedback) -> None:
    """Audit every candidate on the run (refused ones never reach a revision)."""
    kind = "repair_accepted" if verdict.accepted else "repair_refused"
    text = (f"repair candidate {verdict.attempt} accepted" if verdict.accepted else
            f"repair candidate {verdict.attempt} refused by {', '.join(verdict.refused_by)}")
    store.add_event(context.run_id, kind, text, data={
        k: v for k, v in verdict.to_json().items() if k != "feedback"})

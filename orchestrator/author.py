"""Authoring (paper II-B): a request becomes a script the checker accepts, or its violations.

skill document + capability catalog (restricted to the envelope's grants) +
the request → model → extract → checker. With ``max_attempts`` > 1 the
violations go back to the model like in the repair loop; the default is one
shot, which is what the paper's authoring benchmark measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.envelope import Envelope
from broker.errors import InputError
from orchestrator.checker import CheckReport, Violation, check
from orchestrator.models import ModelBackend, extract_script
from orchestrator.skill import render_skill

_ANSWER = ("Answer with the complete script in one ```python block: a module whose entry "
           "point is `async def orchestrate(ctx, args)`. Read variable inputs from `args`.")


@dataclass(frozen=True)
class AuthorResult:
    script: str
    report: CheckReport
    attempts: int = 1
    outputs: list[str] = field(default_factory=list)  # raw model answers, in order

    @property
    def valid(self) -> bool:
        return self.report.valid

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "attempts": self.attempts, "script": self.script,
                **{k: v for k, v in self.report.to_json().items() if k != "valid"}}


def envelope_section(envelope: Envelope) -> str:
    budget = envelope.budget
    limits = []
    if budget.max_calls is not None:
        limits.append(f"at most {budget.max_calls} provider calls")
    if budget.max_cost is not None:
        limits.append(f"at most {budget.max_cost:g} total price")
    lines = ["## Envelope", "",
             f"- granted capabilities: {', '.join(envelope.grants) or '(none)'}",
             f"- concurrency: {envelope.concurrency} calls at a time",
             f"- budget: {', '.join(limits) or 'unlimited'}"]
    if envelope.approvals_required:
        lines.append(f"- need an approval: {', '.join(envelope.approvals_required)}")
    return "\n".join(lines)


def author_messages(request: str, envelope: Envelope,
                    catalog: Mapping[str, Capability] = CATALOG) -> list[dict[str, str]]:
    user = f"# Task\n\n{request.strip()}\n\n{envelope_section(envelope)}\n\n{_ANSWER}"
    return [{"role": "system", "content": render_skill(catalog, envelope.grants)},
            {"role": "user", "content": user}]


def _violations_message(report: CheckReport, script: str) -> str:
    """Each violation with the script's offending line, as the repair loop shows them."""
    source = script.split("\n")
    lines = ["The checker rejected the script:"]
    for v in report.violations:
        text = source[v.line - 1].strip() if 1 <= v.line <= len(source) else ""
        yours = f"\n    your line {v.line}:\n      {text}" if text else ""
        lines.append(f"- {v.rule} line {v.line}: {v.message}{yours}\n    fix: {v.hint}")
    return "\n".join([*lines, "", _ANSWER])


def _judge(output: str, capabilities: frozenset[str]) -> tuple[str, CheckReport]:
    script = extract_script(output)
    if not script:
        return "", CheckReport.from_violations([Violation(
            "R00", 1, "the model's answer contained no script",
            "answer with the complete script in one ```python block")])
    return script, check(script, capabilities=capabilities)


def author_script(request: str, *, model: ModelBackend, envelope: Envelope | None = None,
                  catalog: Mapping[str, Capability] = CATALOG,
                  max_attempts: int = 1) -> AuthorResult:
    """Ask ``model`` for a script for ``request``; return it with the checker's report."""
    if not request.strip():
        raise InputError("the request is empty; describe the job, e.g. \"four storyboard "
                         "shots of a harbour at dawn, one image each\"")
    if max_attempts < 1:
        raise InputError(f"max_attempts is {max_attempts}; allow at least one")
    envelope = envelope or Envelope()
    capabilities = frozenset(envelope.grants) & frozenset(catalog)
    messages = author_messages(request, envelope, catalog)
    outputs: list[str] = []
    script, report = "", CheckReport.from_violations([])
    for _ in range(max_attempts):
        output = model.complete(messages, purpose="author")
        outputs.append(output)
        script, report = _judge(output, capabilities)
        if report.valid:
            break
        messages = [*messages, {"role": "assistant", "content": output},
                    {"role": "user", "content": _violations_message(report, script)}]
    return AuthorResult(script=script, report=report, attempts=len(outputs), outputs=outputs)

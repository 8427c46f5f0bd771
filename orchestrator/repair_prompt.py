"""The repair prompt: what the model is told, as plain Markdown (pure text building).

Layout (one chat conversation):

1. system: the skill document with the capability catalog (``orchestrator/skill.md``).
2. user: the repair request: the last failure (structured), the frozen sites with
   their source lines, the script that committed the prefix, the failed script,
   the run's args when known, and the task.
3. per refused candidate: assistant = the model's answer verbatim, user = the
   structured counterexamples (gate, checker, call-count guard) and the request
   to answer again.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from broker.catalog import Capability
from orchestrator.gate import Counterexample, CounterexampleKind
from orchestrator.sites import Site, assign_sites
from orchestrator.skill import render_skill

if TYPE_CHECKING:
    from orchestrator.repair import AttemptFeedback, RepairContext

_ARGS_LIMIT = 4000
_FAILURE_FIELDS = ("type", "message", "capability", "identity", "code", "status", "line")
ANSWER = ("Answer with the complete repaired script in one ```python block. Keep every "
          "frozen call expression exactly as it is and in its place; change the code around "
          "it, or add new calls for new work.")


def _fence(text: str) -> str:
    return f"```python\n{text.rstrip()}\n```"


def _indent(text: str, pad: str = "      ") -> str:
    return "\n".join(pad + line for line in text.split("\n"))


def failure_section(context: RepairContext) -> str:
    failed = context.failed
    lines = [f"## Last failure (revision {failed.revision}, status {failed.status})", ""]
    for name in _FAILURE_FIELDS:
        value = context.failure.get(name)
        if value not in (None, ""):
            lines.append(f"- {name}: {value}")
    extra = {k: v for k, v in context.failure.items() if k not in _FAILURE_FIELDS}
    if extra:
        lines.append(f"- details: {json.dumps(extra, sort_keys=True, default=str)[:500]}")
    if len(lines) == 2:
        lines.append("- (the revision recorded no structured error)")
    for ident in context.failed_identities[:10]:
        lines.append(f"- call {ident.get('site')} path {ident.get('path')} occurrence "
                     f"{ident.get('occurrence')} ({ident.get('capability')}): "
                     f"{ident.get('outcome')}")
    lines.append("")
    lines.append("An identity is written site@path:occurrence: the callsite, the fanout "
                 "branch path, and the call's occurrence at that site and path.")
    return "\n".join(lines)


def frozen_section(context: RepairContext) -> str:
    if not context.frozen:
        return ("## Frozen sites\n\nNothing is committed yet: no call succeeded, so every "
                "call of the repaired script will execute.")
    lines = ["## Frozen sites (committed: keep these call expressions exactly, in place)", ""]
    for name in sorted(context.frozen):
        site = context.frozen[name]
        where = context.frozen_lines.get(name)
        head = (f"- `{name}` → {site.capability}, {site.occurrences} committed "
                f"occurrence(s)")
        if where is None:
            lines.append(head + " (source line not available)")
        else:
            lines.append(f"{head}, line {where.line} of the failed script:")
            lines.append(_indent(where.text))
    return "\n".join(lines)


def scripts_section(context: RepairContext) -> str:
    failed, original = context.failed, context.original
    if original.revision == failed.revision:
        return (f"## The failed script (revision {failed.revision}; it also committed the "
                f"prefix)\n\n{_fence(failed.source_text)}")
    return (f"## The script that committed the prefix (revision {original.revision})\n\n"
            f"{_fence(original.source_text)}\n\n"
            f"## The failed script (revision {failed.revision})\n\n"
            f"{_fence(failed.source_text)}")


def args_section(context: RepairContext) -> str:
    if context.args is None:
        return ""
    text = json.dumps(context.args, sort_keys=True, default=str)
    if len(text) > _ARGS_LIMIT:
        text = text[:_ARGS_LIMIT] + " …(truncated)"
    return f"## The run's args\n\n```json\n{text}\n```"


def request_message(context: RepairContext) -> str:
    parts = [f"# Repair run {context.run_id}",
             "The script below failed partway. Write a repaired script that is replayed on "
             "the same run: committed calls are served from the record, new calls execute.",
             failure_section(context), frozen_section(context), scripts_section(context),
             args_section(context),
             f"## Your task\n\nThe repaired script must keep at least "
             f"{context.required_calls} capability call(s) (the failed script has that "
             f"many). {ANSWER}"]
    return "\n\n".join(p for p in parts if p)


def initial_messages(context: RepairContext, catalog: Mapping[str, Capability],
                     grants: Iterable[str] | None = None) -> list[dict[str, str]]:
    return [{"role": "system", "content": render_skill(catalog, grants)},
            {"role": "user", "content": request_message(context)}]


# ---- feedback after a refused candidate ----------------------------------------------------


def _candidate_sites(candidate: str) -> list[Site]:
    try:
        return assign_sites(ast.parse(candidate))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []


def _source_line(candidate: str, line: int | None) -> str:
    lines = candidate.split("\n")
    if line is None or not 1 <= line <= len(lines):
        return ""
    return lines[line - 1].strip()


def counterexample_text(ce: Counterexample, context: RepairContext, candidate: str) -> str:
    where = context.frozen_lines.get(ce.site)
    committed = (f"\n    committed at line {where.line} of the failed script:\n"
                 f"{_indent(where.text)}" if where else "")
    if ce.kind is CounterexampleKind.REMOVED:
        moved = [s for s in _candidate_sites(candidate)
                 if s.capability == ce.expected_capability and s.site not in context.frozen]
        hint = "".join(f"\n    your candidate calls {s.capability} at new site `{s.site}` "
                       f"(line {s.line}); a call at a new site is new, paid work"
                       for s in moved[:3])
        return f"- removed: {ce.describe()}.{committed}{hint}"
    found = _source_line(candidate, ce.line)
    yours = f"\n    your line {ce.line}:\n{_indent(found)}" if found else ""
    return f"- {ce.kind}: {ce.describe()}.{yours}{committed}"


def feedback_message(feedback: AttemptFeedback, context: RepairContext, candidate: str, *,
                     detail: str = "") -> str:
    parts = [f"Candidate {feedback.attempt} was refused before anything ran "
             f"({', '.join(feedback.refused_by)})."]
    if "extract" in feedback.refused_by:
        parts.append("Your answer contained no script.")
    if "decode" in feedback.refused_by:
        parts.append(f"The script could not be read: {detail}")
    if feedback.counterexamples:
        parts.append("Gate (frozen sites must keep their place, capability and call "
                     "expression):\n" + "\n".join(
                         counterexample_text(ce, context, candidate)
                         for ce in feedback.counterexamples))
    if feedback.violations:
        parts.append("Checker violations:\n" + "\n".join(
            f"- {v.rule} line {v.line}: {v.message}\n    fix: {v.hint}"
            for v in feedback.violations))
    if "call_count" in feedback.refused_by:
        parts.append(f"Call-count guard: your candidate has {feedback.calls} capability "
                     f"call(s); the failed script has {feedback.required_calls}. A repair "
                     "must not drop calls: answer with the whole script, keep every call, "
                     "and add new ones for new work.")
    parts.append(ANSWER)
    return "\n\n".join(parts)

"""What the model is told after a round that did not succeed (pure text building).

Two kinds of round end in feedback:

* refused before anything ran (extract, decode, checker, gate, call-count guard): every
  reason, each with the candidate's offending line next to the committed one;
* accepted, run, and stopped by the runtime (a replay divergence, a ledger denial, an
  orphan stop, the budget, a denied capability): the counterexample with the committed
  payload, the fanout element, and the candidate's line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.errors import AnswerCutOff, InputError
from broker.identity import Identity
from orchestrator.gate import Counterexample, CounterexampleKind, check_gate
from orchestrator.inputs import short
from orchestrator.refusals import failed_lines
from orchestrator.repair_context import (
    CommittedCall,
    RepairContext,
    parsed_sites,
    source_line,
)
from orchestrator.repair_prompt import (
    answer_request,
    indent,
    payload_text,
    round_line,
    where_path,
)
from orchestrator.repair_verdict import AttemptFeedback, runtime_refusal
from orchestrator.sites import Site

# ---- refused before anything ran -------------------------------------------------------------


def _your_line(candidate: str, line: int | None, label: str = "your line") -> str:
    text = source_line(candidate, line) if line else ""
    return f"\n    {label} {line}:\n{indent(text)}" if text else ""


def counterexample_text(ce: Counterexample, context: RepairContext, candidate: str) -> str:
    where = context.frozen_lines.get(ce.site)
    committed = (f"\n    committed at line {where.line} of {where.where}:\n"
                 f"{indent(where.text)}" if where else "")
    if ce.kind is CounterexampleKind.REMOVED:
        moved = [s for s in parsed_sites(candidate) or []
                 if s.capability == ce.expected_capability and s.site not in context.frozen]
        hint = "".join(f"\n    your candidate calls {s.capability} at new site `{s.site}` "
                       f"(line {s.line}) with another call expression; a call whose "
                       "expression changed is new, paid work" for s in moved[:3])
        return f"- removed: {ce.describe()}.{committed}{hint}"
    if ce.kind is CounterexampleKind.AMBIGUOUS:
        return f"- ambiguous: {ce.describe()}.{committed}"
    return f"- {ce.kind}: {ce.describe()}.{_your_line(candidate, ce.line)}{committed}"


def refusal_message(feedback: AttemptFeedback, context: RepairContext, candidate: str, *,
                    detail: str = "", rounds: int = 1) -> str:
    parts = [f"{round_line(feedback.attempt + 1, rounds)} Candidate {feedback.attempt} was "
             f"refused before anything ran ({', '.join(feedback.refused_by)}); it spent "
             "nothing."]
    if "extract" in feedback.refused_by:
        parts.append("Your answer was cut off at your output limit before it ended: send "
                     "only the whole repaired script, without prose or a copy of the failed "
                     "script." if any(isinstance(r, AnswerCutOff) for r in feedback.refusals)
                     else "Your answer contained no script.")
    if "decode" in feedback.refused_by:
        parts.append(f"The script could not be read: {detail}")
    if feedback.counterexamples:
        parts.append("Gate (each committed call must be found with its capability and "
                     "exact call expression):\n" + "\n".join(
                         counterexample_text(ce, context, candidate)
                         for ce in feedback.counterexamples))
    if feedback.violations:
        parts.append("Checker violations:\n" + "\n".join(
            f"- {v.rule} line {v.line}: {v.message}{_your_line(candidate, v.line)}\n"
            f"    fix: {v.hint}" for v in feedback.violations))
    if "call_count" in feedback.refused_by:
        parts.append(call_count_text(feedback))
    parts.append(answer_request(context.relocation))
    return "\n\n".join(parts)


def call_count_text(feedback: AttemptFeedback) -> str:
    if feedback.counted == "calls":
        return _calls_short_text(feedback)
    where = "".join(f"\n- line {u.line} of {u.where}:\n{indent(u.text)}"
                    for u in feedback.unbounded)
    text = ("Call-count guard: some calls have no static bound (a while loop, or a loop over "
            "the run's input), so the calls cannot be counted and the guard compares call "
            f"expressions instead.{where}\nYour candidate has {feedback.calls} capability "
            "call expression(s) in its source; the failed script has "
            f"{feedback.required_calls}.")
    if feedback.dropped:
        text += " Your candidate lacks these call expressions of the failed script:" + "".join(
            f"\n- {c.capability} at line {c.line} of the failed script:\n{indent(c.text)}"
            for c in feedback.dropped)
    return text + ("\nA repair must not make fewer calls than the failed script: give every "
                   "loop a static bound (a literal list, range(n), a constant slice) so its "
                   "calls can be counted, or keep every call expression; add new calls for new "
                   "work.")


def _calls_short_text(feedback: AttemptFeedback) -> str:
    text = [f"Call-count guard: your candidate can make at most {feedback.calls} capability "
            f"call(s); the failed script can make {feedback.required_calls}. (A call counts "
            "once per element of the loops around it: a loop over a literal list of 3 is 3 "
            "calls, range(4) is 4.) Your candidate makes fewer calls of:"]
    for fewer in feedback.short:
        where = failed_lines(fewer.lines)
        has = (f"can make at most {fewer.calls} call{'' if fewer.calls == 1 else 's'}"
               if fewer.calls else "makes none")
        text.append(f"- {fewer.capability}: your candidate {has} where the failed script can "
                    f"make {fewer.required}{where}:"
                    + "".join(f"\n{indent(c.text)}" for c in fewer.expressions))
    text.append("A repair must not make fewer calls than the failed script: keep the work of "
                "every call (as literal calls, or one call in a loop over all the values), and "
                "add new calls for new work.")
    return "\n".join(text)


# ---- accepted, run, and stopped by the runtime -----------------------------------------------


def runtime_message(feedback: AttemptFeedback, context: RepairContext, candidate: str,
                    report: Mapping[str, Any], *, rounds: int = 1,
                    catalog: Mapping[str, Capability] = CATALOG,
                    new_commits: tuple[CommittedCall, ...] = ()) -> str:
    """The counterexample of a candidate's run that the runtime stopped (``report`` is its
    run JSON); ``context`` is the one the candidate was judged against."""
    error = dict(report.get("error") or {})
    calls = report.get("calls") or {}
    kind = runtime_refusal(report) or "stop"
    parts = [f"{round_line(feedback.attempt + 1, rounds)} Candidate {feedback.attempt} passed "
             f"the checker and the gate and ran as revision {report.get('revision')}, but the "
             f"runtime stopped it ({kind}: {error.get('type')}). It spent "
             f"{float(report.get('spend') or 0):g} on {calls.get('executed', 0)} provider "
             f"call(s); {calls.get('replayed', 0)} committed call(s) were replayed.",
             f"The runtime said: {error.get('message')}"]
    lines = _CandidateLines(candidate, context)
    detail = {"divergence": _divergence, "ledger": _repeat, "orphans": _orphans}.get(kind)
    if detail is not None:
        parts.append(detail(context, error, report, lines, catalog))
    elif kind == "budget":
        parts.append("The envelope's budget allows no more new provider calls. Replays are "
                     "free: keep committed calls replaying, and do less new work.")
    elif kind == "denied":
        parts.append("A call was denied before dispatch (a capability that is not granted, "
                     "or a payload field the capability does not have): use a granted "
                     f"capability and its payload fields.{lines.at(error.get('identity'))}")
    if new_commits:
        parts.append("Before it stopped, the candidate committed these calls; they are "
                     "frozen now too:\n" + "\n".join(
                         f"- `{c.identity}` ({c.capability}): "
                         f"{payload_text(c.capability, c.payload, catalog)}"
                         for c in new_commits[:20]))
    parts.append(answer_request(context.relocation))
    return "\n\n".join(parts)


class _CandidateLines:
    """The candidate's source line for a storage identity (through the gate's remap)."""

    def __init__(self, candidate: str, context: RepairContext) -> None:
        self.candidate = candidate
        sites = parsed_sites(candidate) or []
        gate = check_gate(context.frozen, sites, relocation=context.relocation)
        self.by_storage: dict[str, Site] = {gate.storage.get(s.site, s.site): s for s in sites}

    def at(self, identity: Any, label: str = "your line") -> str:
        try:
            site = Identity.parse(str(identity)).site
        except (InputError, ValueError):  # a malformed identity in an error: no line
            return ""
        found = self.by_storage.get(site)
        return _your_line(self.candidate, found.line, label) if found else ""


def _committed(context: RepairContext, identity: Any) -> CommittedCall | None:
    return next((c for c in context.committed if str(c.identity) == str(identity)), None)


def _call_head(context: RepairContext, label: str, identity: Any, capability: str) -> str:
    try:
        ident = Identity.parse(str(identity))
        where = where_path(context, ident.site, ident.path) if ident.path else ""
    except (InputError, ValueError):  # shown without its fanout element
        where = ""
    return f"- {label} at `{identity}` ({capability}){', ' + where if where else ''}:"


def _divergence(context: RepairContext, error: dict[str, Any], report: Mapping[str, Any],
                lines: _CandidateLines, catalog: Mapping[str, Capability]) -> str:
    first = str(error.get("identity"))
    diverged = [f"{i['site']}@{'.'.join(map(str, i['path']))}:{i['occurrence']}"
                for i in report.get("identities") or [] if i.get("outcome") == "diverged"]
    text = []
    for identity in sorted(set(diverged) | {first}, key=lambda i: (i != first, i))[:10]:
        committed = _committed(context, identity)
        capability = committed.capability if committed else str(error.get("capability") or "?")
        text.append(_call_head(context, "divergence", identity, capability))
        if committed is not None and committed.recorded:
            text.append(f"    the committed payload: "
                        f"{payload_text(capability, committed.payload, catalog)}")
        sent = f" ({short(str(error['digest']))})" if identity == first and error.get(
            "digest") else ""
        text.append(f"    your candidate sent another payload to this call{sent}; nothing "
                    "was dispatched")
    if len(set(diverged) | {first}) > 10:
        text.append(f"- … {len(set(diverged) | {first}) - 10} more diverged calls")
    committed = _committed(context, first)
    text.append(lines.at(first).lstrip("\n"))
    where = context.frozen_lines.get(committed.identity.site) if committed else None
    if where is not None:
        text.append(f"    committed at line {where.line} of {where.where}:\n{indent(where.text)}")
    text.append("Data that reached a committed call must reach it unchanged: keep the values "
                "that produced the committed payload (a constant list, a size, a loop "
                "variable) for the committed elements; change only what feeds the calls that "
                "failed or are new.")
    return "\n".join(t for t in text if t)


def _repeat(context: RepairContext, error: dict[str, Any], report: Mapping[str, Any],
            lines: _CandidateLines, catalog: Mapping[str, Capability]) -> str:
    identity, paid = error.get("identity"), error.get("committed_identity")
    committed = _committed(context, paid)
    capability = committed.capability if committed else "?"
    text = [_call_head(context, "semantic repeat", identity, capability),
            f"    this exact payload was already paid at `{paid}`"
            + (f" (line {error['committed_line']})" if error.get("committed_line") else "")]
    if committed is not None and committed.recorded:
        text.append(f"    payload: {payload_text(capability, committed.payload, catalog)}")
    text.append(lines.at(identity).lstrip("\n"))
    text.append("Reuse the committed result: keep exactly one call with that expression and "
                "data (it replays for free) and pass its result to where this call needs "
                "it, or change this call's payload if you want different work. Adding "
                "take= does not help: a further take of a paid payload needs a person's "
                "approval in the envelope.")
    return "\n".join(t for t in text if t)


def _orphans(context: RepairContext, error: dict[str, Any], report: Mapping[str, Any],
             lines: _CandidateLines, catalog: Mapping[str, Capability]) -> str:
    orphans = [o.get("identity") for o in report.get("orphans") or []]
    text = [f"Your candidate did not reach {len(orphans)} committed identit"
            f"{'y' if len(orphans) == 1 else 'ies'}, and this run's orphan policy is stop:"]
    for identity in orphans[:20]:
        committed = _committed(context, identity)
        capability = committed.capability if committed else "?"
        payload = (f"; payload {payload_text(capability, committed.payload, catalog)}"
                   if committed is not None and committed.recorded else "")
        text.append(f"- `{identity}` ({capability}){payload}")
    text.append("Keep the code path that reaches every committed call: the same branches and "
                "the same fanout elements, with the same data.")
    return "\n".join(text)

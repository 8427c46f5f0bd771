"""The repair request: what the model is told first, as plain Markdown (pure text building).

Layout (one chat conversation):

1. system: the skill document with the capability catalog (``orchestrator/skill.md``).
2. user: the repair request: the round budget, the last failure (structured, with the
   failed call's payload), every committed identity with its capability and payload
   and the fanout element its path refers to, the script that committed the prefix,
   the failed script, the run's args, and the task.
3. per round that did not succeed: assistant = the model's answer verbatim, user = why
   it was refused before anything ran, or the runtime refusal its run hit
   (``orchestrator.repair_feedback``), and the request to answer again.

Payloads are shown as the host compares them (schema defaults filled in, unset optional
fields left out), bounded in size; fields the catalog marks secret show as ``"<secret>"``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from broker.catalog import CATALOG, Capability
from broker.identity import MOVED_ASIDE
from broker.prefix import RACE
from orchestrator.fanout_paths import describe_path
from orchestrator.repair_context import CommittedCall, RepairContext
from orchestrator.skill import render_skill

_ARGS_LIMIT = 4000
_PAYLOAD_LIMIT = 300
_COMMITTED_LIMIT = 8000  # characters of committed-identity lines in one prompt
_PER_SITE = 40  # committed identities listed per frozen site
_FAILURE_FIELDS = ("type", "message", "capability", "identity", "code", "status", "line")
IDENTITY_NOTE = ("An identity is written site@path:occurrence: the callsite (a chain of "
                 "call expressions from `orchestrate`), the fanout path (one branch index "
                 "per fanout entered) and the call's occurrence at that site and path.")


def answer_request(relocation: str) -> str:
    """The closing instruction of every message that asks for a script."""
    keep = ("Keep every committed call expression exactly as it is, and make the same data "
            "reach it. ")
    if relocation == "stop":
        keep += "Leave each committed call in its place (this run does not relocate calls). "
    else:
        keep += ("A committed call may move (into a helper, a new block) only when exactly "
                 "one call in your script keeps its expression. ")
    return ("Answer with the complete repaired script in one ```python block. " + keep
            + "Change the code around the calls, or add new calls for new work.")


def round_line(number: int, rounds: int) -> str:
    if number > rounds:  # the last round's feedback: kept for the record, never asked
        return f"No round left ({rounds} in all)."
    return f"Round {number} of {rounds}."


def fence(text: str) -> str:
    return f"```python\n{text.rstrip()}\n```"


def indent(text: str, pad: str = "      ") -> str:
    return "\n".join(pad + line for line in text.split("\n"))


def payload_text(capability: str, payload: Any, catalog: Mapping[str, Capability] = CATALOG,
                 limit: int = _PAYLOAD_LIMIT) -> str:
    """A payload as the model sees it: secrets redacted, unset optional fields (null by
    default and null here) left out, bounded in size."""
    cap = catalog.get(capability)
    shown = payload
    if cap is not None and isinstance(payload, dict):
        fields = cap.input_model.model_fields
        shown = {k: v for k, v in cap.redact(payload).items()
                 if not (v is None and k in fields and not fields[k].is_required()
                         and fields[k].default is None)}
    text = json.dumps(shown, sort_keys=True, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = f"{text[:limit]}…(+{len(text) - limit} chars)"
    return text


def where_path(context: RepairContext, site: str, path: Iterable[int]) -> str:
    indices = list(path)
    if indices and indices[-1] >= MOVED_ASIDE:  # the host's storage key, no fanout branch
        made_at = describe_path(indices[:-1], context.entry_line(site), list(context.fanouts))
        return (f"{made_at} (new work revision {indices[-1] - MOVED_ASIDE} made there after "
                "the call committed at that path moved; stored aside, it replays only "
                "where its call expression and payload are asked for)")
    return describe_path(indices, context.entry_line(site), list(context.fanouts))


# ---- sections --------------------------------------------------------------------------------


def failure_section(context: RepairContext, catalog: Mapping[str, Capability]) -> str:
    failed = context.failed
    lines = [f"## Last failure (revision {failed.revision}, status {failed.status})", ""]
    for name in _FAILURE_FIELDS:
        value = context.failure.get(name)
        if value not in (None, ""):
            lines.append(f"- {name}: {value}")
    extra = {k: v for k, v in context.failure.items()
             if k not in _FAILURE_FIELDS and v not in (None, "")}
    if extra:
        lines.append(f"- details: {json.dumps(extra, sort_keys=True, default=str)[:500]}")
    if len(lines) == 2:
        lines.append("- (the revision recorded no structured error)")
    for call in context.failed_calls[:10]:
        site, _, rest = call.identity.partition("@")
        path = [int(p) for p in rest.split(":")[0].split(".") if p]
        lines.append(f"- {call.outcome} call `{call.identity}` ({call.capability}), "
                     f"{where_path(context, site, path)}")
        if call.recorded:
            sent = payload_text(call.capability, call.payload, catalog)
            lines.append(f"    payload sent: {sent}")
    lines += ["", IDENTITY_NOTE]
    return "\n".join(lines)


def committed_section(context: RepairContext, catalog: Mapping[str, Capability]) -> str:
    if not context.frozen:
        return ("## Committed calls\n\nNothing is committed yet: no call succeeded, so every "
                "call of the repaired script will execute.")
    by_site: dict[str, list[CommittedCall]] = defaultdict(list)
    for call in context.committed:
        by_site[call.identity.site].append(call)
    count = sum(len(v) for v in by_site.values())
    lines = [f"## Committed calls ({count} identities at {len(context.frozen)} frozen sites)",
             "", "Each committed call expression is frozen, and so is the data that reached "
             "it: at replay the host compares the payload, and a different payload stops the "
             "run (ReplayDivergence) before anything new runs. Payloads are shown as the "
             "host compares them, schema defaults filled in (unset optional fields left out); "
             "secret fields show as \"<secret>\".", ""]
    budget = [_COMMITTED_LIMIT]
    for name in sorted(context.frozen):
        lines += _site_lines(context, name, by_site.get(name, []), catalog, budget)
    return "\n".join(lines)


def _site_lines(context: RepairContext, name: str, calls: list[CommittedCall],
                catalog: Mapping[str, Capability], budget: list[int]) -> list[str]:
    site = context.frozen[name]
    where = context.frozen_lines.get(name)
    head = f"- `{name}` → {site.capability}, {site.occurrences} committed occurrence(s)"
    if where is None:
        lines = [head + " (source line not available)"]
    else:
        lines = [f"{head}, line {where.line} of {where.where}:", indent(where.text)]
    shown = 0
    for call in sorted(calls, key=lambda c: c.identity):
        if shown >= _PER_SITE or budget[0] <= 0:
            lines.append(f"  - … {len(calls) - shown} more committed identities at this site "
                         "(not listed: the prompt is bounded)")
            break
        line = _identity_line(context, call, catalog)
        budget[0] -= len(line)
        lines.append(line)
        shown += 1
    return lines


def _identity_line(context: RepairContext, call: CommittedCall,
                   catalog: Mapping[str, Capability]) -> str:
    ident = call.identity
    head = f"  - `{ident}`: {where_path(context, ident.site, ident.path)}"
    if call.capability == RACE:
        return f"{head}; race decided, winner branch {call.winner}"
    if not call.recorded:
        return f"{head}; payload not recorded (committed before payloads were kept)"
    take = f" (take={call.take})" if call.take > 1 else ""
    return f"{head}; payload {payload_text(call.capability, call.payload, catalog)}{take}"


def scripts_section(context: RepairContext) -> str:
    failed, original = context.failed, context.original
    if original.revision == failed.revision:
        return (f"## The failed script (revision {failed.revision}; it also committed the "
                f"prefix)\n\n{fence(failed.source_text)}")
    return (f"## The script that committed the prefix (revision {original.revision})\n\n"
            f"{fence(original.source_text)}\n\n"
            f"## The failed script (revision {failed.revision})\n\n"
            f"{fence(failed.source_text)}")


def args_section(context: RepairContext) -> str:
    if context.args is None:
        return ""
    text = json.dumps(context.args, sort_keys=True, default=str)
    if len(text) > _ARGS_LIMIT:
        text = text[:_ARGS_LIMIT] + " …(truncated)"
    return f"## The run's args (the repaired script receives the same)\n\n```json\n{text}\n```"


def task_section(context: RepairContext) -> str:
    calls = context.required_at_most
    if calls is None:  # the call-count guard compares call expressions (repair.count_calls)
        where = ", ".join(str(c.line) for c in context.required[:12])
        return (f"## Your task\n\nThe repaired script must keep at least "
                f"{context.required_calls} capability call expression(s) in its source, as "
                f"the failed script has (lines {where or '-'}). "
                f"{answer_request(context.relocation)}")
    each = "; ".join(
        f"{c.capability}: {c.at_most} (line{'s' if len(c.expressions) > 1 else ''} "
        f"{', '.join(str(e.line) for e in c.expressions[:12])})"
        for c in context.required_counts[:12])
    return (f"## Your task\n\nThe repaired script must be able to make at least {calls} "
            f"capability call(s), as the failed script can ({each or '-'}); a call counts "
            "once per element of the loops around it (a loop over a literal list of 3 is 3 "
            f"calls, range(4) is 4). {answer_request(context.relocation)}")


def request_message(context: RepairContext, catalog: Mapping[str, Capability] = CATALOG,
                    *, rounds: int = 1) -> str:
    parts = [f"# Repair run {context.run_id}",
             f"{round_line(1, rounds)} You have {rounds} answer(s) in all: a candidate that "
             "is refused, or whose run the runtime stops, is explained to you and you answer "
             "again.",
             "The script below failed partway. Write a repaired script that is replayed on "
             "the same run: committed calls are served from the record (free), new calls "
             "execute (paid).",
             failure_section(context, catalog), committed_section(context, catalog),
             scripts_section(context), args_section(context), task_section(context)]
    return "\n\n".join(p for p in parts if p)


def initial_messages(context: RepairContext, catalog: Mapping[str, Capability] = CATALOG,
                     grants: Iterable[str] | None = None, *, rounds: int = 1
                     ) -> list[dict[str, str]]:
    return [{"role": "system", "content": render_skill(catalog, grants)},
            {"role": "user", "content": request_message(context, catalog, rounds=rounds)}]

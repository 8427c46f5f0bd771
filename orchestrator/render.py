"""Human output for the CLI (rich tables). JSON output never passes through here."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the CLI imports this module for --help: rich loads on first output
    from rich.console import Console

    from broker.records import AttemptRecord, RunRecord
    from orchestrator.checker import CheckReport
    from orchestrator.gate import GateResult
    from orchestrator.sites import Site

_STATUS_STYLE = {"succeeded": "green", "failed": "red", "stopped": "yellow",
                 "blocked": "magenta", "running": "cyan"}
_OUTCOME_STYLE = {"executed": "cyan", "replayed": "green", "failed": "red",
                  "diverged": "yellow", "denied": "magenta", "stopped": "yellow"}


# Text a script controls (error messages and types, logs, results) reaches the operator's
# terminal here: control characters are shown, not sent (ESC starts terminal sequences that
# can write the clipboard, retitle or reset the terminal).
_CONTROLS = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
             if code not in (0x09, 0x0A)}


def Table(*headers: str, **options: Any) -> Any:
    from rich.table import Table as RichTable

    return RichTable(*headers, **options)


def escape(text: str) -> str:
    from rich.markup import escape as markup_escape

    return markup_escape(str(text).translate(_CONTROLS))


def _status(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, 'white')}]{status}[/]"


def check_report(c: Console, report: CheckReport) -> None:
    if report.valid:
        c.print(f"[green]valid[/]: {report.facts.get('capability_calls', 0)} capability "
                "call(s)")
    for v in report.violations:
        c.print(f"[red]{v.rule}[/] line {v.line}: {escape(v.message)}")
        c.print(f"    fix: {escape(v.hint)}")


def sites(c: Console, items: list[Site]) -> None:
    table = Table()
    for header in ("site", "capability"):
        table.add_column(header, overflow="fold")  # never cut: two sites may differ at the end
    for header in ("line", "fingerprint"):
        table.add_column(header, no_wrap=True)
    for s in items:
        table.add_row(s.site, s.capability, str(s.line), s.fingerprint[:12])
    c.print(table)


def relocation_line(r: dict[str, Any]) -> str:
    committed = f"line {r['committed_line']}" if r.get("committed_line") else "its old line"
    return (f"relocated {r['from']} ({committed}) -> {r['to']} (line {r['line']}): "
            "its committed calls replay there when the payload is the same")


def gate(c: Console, result: GateResult) -> None:
    if result.accepted:
        c.print(f"[green]accepted[/]: all {result.frozen} frozen site(s) kept")
        for r in result.relocations:
            c.print(f"  {escape(relocation_line(r.to_json()))}")
        return
    c.print("[red]rejected[/] before any container starts:")
    for ce in result.counterexamples:
        c.print(f"  {ce.kind}: {escape(ce.describe())}")


def run_report(c: Console, report: dict[str, Any]) -> None:
    c.print(f"run [bold]{report['run_id']}[/] revision {report['revision']}: "
            f"{_status(report['status'])}")
    calls = report["calls"]
    undecided = f", uncertain {calls['uncertain']}" if calls.get("uncertain") else ""
    c.print(f"  provider calls {calls['executed']} (succeeded {calls['succeeded']}, failed "
            f"{calls['failed']}{undecided}), replayed {calls['replayed']}, denied "
            f"{calls['denied']}")
    if report.get("violations"):
        for v in report["violations"]:
            c.print(f"  [red]{v['rule']}[/] line {v['line']}: {escape(v['message'])}")
            c.print(f"      fix: {escape(v['hint'])}")
    for ce in report["gate"].get("counterexamples", []):
        c.print(f"  gate: [red]{ce['kind']}[/] {ce['site']}")
    for r in report["gate"].get("relocations", []):
        c.print(f"  gate: {escape(relocation_line(r))}")
    if report["identities"]:
        table = Table()
        for header in ("identity", "capability"):
            table.add_column(header, overflow="fold")  # fanout identities differ at the end
        table.add_column("outcome", no_wrap=True)
        for ident in report["identities"]:
            path = ".".join(map(str, ident["path"]))
            style = _OUTCOME_STYLE.get(ident["outcome"], "white")
            table.add_row(f"{ident['site']}@{path}:{ident['occurrence']}",
                          ident["capability"], f"[{style}]{ident['outcome']}[/]")
        c.print(table)
        for ident in report["identities"]:  # a relocated replay: whose result it got
            if ident.get("replayed_from"):
                path = ".".join(map(str, ident["path"]))
                c.print(escape(f"  replayed {ident['site']}@{path}:{ident['occurrence']} "
                               f"from {ident['replayed_from']}"), overflow="fold")
    for orphan in report.get("orphans", []):
        c.print(f"  orphan: {orphan['identity']}")
    for warning in report.get("warnings", []):
        c.print(f"  [yellow]warning[/]: {escape(warning)}")
    if report["error"]:
        c.print(f"  [red]{escape(report['error']['type'])}[/]: "
                f"{escape(report['error']['message'])}")
    if report.get("certificate"):
        cert = report["certificate"]
        c.print(f"  certificate {cert['digest'][:16]}… over {cert['entries']} entries, "
                f"differences: {len(cert['differences'])}")


_STAMP_EXAMPLE = datetime(2026, 12, 31, 23, 59, 59)
_WHOLE_SHARE = 26  # columns a folded identity or run id gets at most beside prose


def _whole(table: Any, header: str) -> None:
    """A column whose every character counts (a run id, an identity): folded onto more
    lines on a narrow terminal, never cut, so two rows can always be told apart."""
    table.add_column(header, overflow="fold", max_width=_WHOLE_SHARE)


def _one_line(c: Console, table: Any, header: str, *beside: int) -> None:
    """A column of prose (a detail, a result): one line, cut with an ellipsis to what the
    terminal leaves beside the other columns (``beside``: their widths)."""
    room = c.width - sum(width + 3 for width in beside) - 4
    table.add_column(header, no_wrap=True, overflow="ellipsis", max_width=max(room, 12))


def _longest(values: Iterable[str], header: str, cap: int = 1000) -> int:
    return min(max([len(header), *map(len, values)]), cap)


def runs(c: Console, items: list[RunRecord]) -> None:
    stamp = "%Y-%m-%d %H:%M:%S" if c.width >= 100 else "%m-%d %H:%M"
    table = Table()
    _whole(table, "run")
    for header in ("status", "revisions", "updated"):
        table.add_column(header, no_wrap=True)
    _one_line(c, table, "detail", _longest([r.run_id for r in items], "run", _WHOLE_SHARE),
              9, 9, len(_STAMP_EXAMPLE.strftime(stamp)))
    for r in items:
        table.add_row(r.run_id, _status(str(r.status)), str(r.revisions),
                      r.updated_at.strftime(stamp), escape(r.detail or ""))
    c.print(table)


def attempt_json(a: AttemptRecord) -> dict[str, Any]:
    return {"id": a.id, "run_id": a.run_id, "identity": str(a.identity),
            "capability": a.capability, "number": a.number, "status": str(a.status),
            "owner": a.owner, "revision": a.revision, "created_at": a.created_at.isoformat(),
            "heartbeat_at": a.heartbeat_at.isoformat(), "idempotency_key": a.idempotency_key,
            "sent_at": _iso(a.sent_at), "answered_at": _iso(a.answered_at), "error": a.error}


def _iso(at: Any) -> str | None:
    return None if at is None else at.isoformat()


def attempts(c: Console, items: list[AttemptRecord]) -> None:
    table = Table()
    table.add_column("id", no_wrap=True)
    _whole(table, "run")
    _whole(table, "identity")
    for header in ("capability", "#", "status", "sent", "answered"):
        table.add_column(header, overflow="fold")
    _whole(table, "owner")
    for a in items:
        table.add_row(str(a.id), a.run_id, str(a.identity), a.capability, str(a.number),
                      _status(str(a.status)), _clock(a.sent_at), _clock(a.answered_at),
                      a.owner)
    c.print(table)


def _clock(at: Any) -> str:
    return "no" if at is None else at.strftime("%H:%M:%S")


def certificate(c: Console, data: dict[str, Any]) -> None:
    ok = not data["differences"]
    c.print(f"certificate of {data['run_id']} (revision {data['revision']}): "
            f"{'[green]verified[/]' if ok else '[red]differs[/]'}, {data['entries']} entries, "
            f"digest {data['digest']}")
    for d in data["differences"]:
        c.print(f"  {d['kind']}: {d['site']} path {d['path']} occurrence {d['occurrence']}")
    for r in data.get("relocations", []):
        c.print(f"  {escape(relocation_line(r))}")


def orphans(c: Console, run_id: str, items: list[dict[str, Any]]) -> None:
    if not items:
        c.print(f"run {run_id}: no orphans")
    for o in items:
        c.print(f"revision {o.get('revision')}: {o.get('identity')} (policy {o.get('policy')})")


def show(c: Console, data: dict[str, Any]) -> None:
    run = data["run"]
    c.print(f"run [bold]{run['run_id']}[/]: {_status(run['status'])}"
            + (f" — {escape(run['detail'])}" if run.get("detail") else ""))
    spend = data["spend"]
    c.print(f"  spend: {spend['attempts']} provider attempts ({spend['succeeded']} succeeded), "
            f"cost {spend['cost']:.4f}; replays saved {spend['replays']} call(s)")
    table = Table("rev", "status", "source", "executed", "replayed", "failed", "denied",
                  "cost")
    for rev in data["revisions"]:
        calls = rev.get("calls") or {}
        table.add_row(str(rev["revision"]), _status(rev["status"]), rev["source_digest"][:12],
                      *(str(calls.get(k, 0)) for k in ("executed", "replayed", "failed",
                                                      "denied")), f"{rev['cost']:.4f}")
    c.print(table)
    for rev in data["revisions"]:
        for r in rev.get("relocations") or []:
            c.print(f"  revision {rev['revision']}: {escape(relocation_line(r))}")
    slots = Table()
    _whole(slots, "committed identity")
    slots.add_column("capability", overflow="fold", max_width=16)
    slots.add_column("rev", no_wrap=True)
    shown = data["slots"]
    _one_line(c, slots, "result",
              _longest([s["identity"] for s in shown], "committed identity", _WHOLE_SHARE),
              _longest([s["capability"] for s in shown], "capability", 16), 3)
    for s in shown:
        slots.add_row(s["identity"], s["capability"], str(s["revision"]),
                      escape(s["result_summary"]))
    c.print(slots)
    if data.get("artifacts"):
        where = data["artifacts"][0]["store"] or "the artifact store"
        c.print(f"artifacts (in {escape(where)}; fetch one with "
                "`revise artifact get ID -o FILE`):")
        for a in data["artifacts"]:
            c.print(f"  {a['id']} {a['media_type']} {a['bytes']} B  ({a['identity']})")
    if data["attempts_open"]:
        c.print("[magenta]open attempts[/] (need `revise reconcile`):")
        for a in data["attempts_open"]:
            c.print(f"  #{a['number']} {a['identity']} {a['status']} owner {a['owner']}")
    if data["events"]:
        events = Table()
        for header in ("time", "rev", "event"):
            events.add_column(header, no_wrap=True)
        _whole(events, "identity")
        last = data["events"][-20:]
        _one_line(c, events, "message", 8, 3, _longest([e["kind"] for e in last], "event"),
                  _longest([e["identity"] or "" for e in last], "identity", _WHOLE_SHARE))
        for e in last:
            events.add_row(e["time"][11:19], str(e["revision"] or ""), e["kind"],
                           e["identity"] or "", escape(e["message"][:100]))
        c.print(events)

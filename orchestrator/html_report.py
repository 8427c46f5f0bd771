"""The run report as one self-contained HTML page (`revise report R --html FILE`).

Rendering only: the facts come from ``orchestrator.inspect.report_view`` (the same
store reading `revise show` uses). The page has inline CSS and nothing else: no
script, no font, no link that fetches; committed images are embedded as ``data:``
URIs (``inspect.embed_images``), so it opens offline and can be mailed or attached
to a ticket. Every value from the store is escaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from html import escape
from typing import Any

OUTCOMES = ("executed", "replayed", "failed", "denied", "diverged", "orphaned", "stopped",
            "unresolved")

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d232b;
background:#f7f8fa}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid
#d6dae0;padding-bottom:4px}
.sub{color:#5b6573;margin:0 0 16px}
.cards{display:flex;flex-wrap:wrap;gap:12px}
.card{background:#fff;border:1px solid #d6dae0;border-radius:6px;padding:10px 14px;
min-width:150px}
.card b{display:block;font-size:20px}
table{border-collapse:collapse;background:#fff;border:1px solid #d6dae0;margin:6px 0}
th,td{border:1px solid #e3e6ea;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4;font-weight:600}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#1d232b;color:#f2f4f7;padding:8px 10px;border-radius:4px;white-space:pre-wrap}
.o{display:inline-block;border-radius:3px;padding:0 6px;font-weight:600;font-size:12px}
.o-executed{background:#dbeafe;color:#1e3a8a}.o-replayed{background:#dcfce7;color:#14532d}
.o-failed{background:#fee2e2;color:#7f1d1d}.o-denied{background:#f3e8ff;color:#581c87}
.o-diverged{background:#fef3c7;color:#78350f}.o-orphaned{background:#e5e7eb;color:#374151}
.o-stopped{background:#ffedd5;color:#7c2d12}.o-unresolved{background:#fae8ff;color:#86198f}
.s-succeeded{color:#15803d}.s-failed{color:#b91c1c}.s-stopped{color:#b45309}
.s-blocked{color:#7e22ce}.s-running{color:#0369a1}
.cost{color:#5b6573;font-size:12px}.none{color:#8a94a3}
.ok{color:#15803d;font-weight:600}.bad{color:#b91c1c;font-weight:600}
.figs{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;background:#fff;border:1px solid #d6dae0;border-radius:6px;padding:8px;
max-width:280px}
figure img{max-width:260px;image-rendering:pixelated;display:block}
figcaption{font-size:12px;color:#5b6573;word-break:break-all}
"""


def _e(value: Any) -> str:
    return escape("" if value is None else str(value))


def _status(status: str) -> str:
    return f'<span class="s-{_e(status)}">{_e(status)}</span>'


def _outcome(outcome: str) -> str:
    kind = outcome if outcome in OUTCOMES else "stopped"
    return f'<span class="o o-{kind}">{_e(outcome)}</span>'


def _money(value: float) -> str:
    return f"{value:.4f}"


def _table(head: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    header = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{header}</tr></thead><tbody>{body}</tbody></table>"


def _cards(view: dict[str, Any]) -> str:
    spend, rerun, cert = view["spend"], view["rerun"], view["certificate"]
    verified = ("no certificate yet" if cert is None else
                '<span class="ok">verified</span>' if not cert["differences"] else
                f'<span class="bad">{len(cert["differences"])} difference(s)</span>')
    cards = [("revisions", _e(view["run"]["revisions"])),
             ("spent", f"{_money(spend['cost'])} <span class='cost'>({spend['attempts']} "
                       "provider attempts)</span>"),
             ("a full rerun", f"{_money(rerun['cost'])} <span class='cost'>(saved "
                              f"{_money(rerun['saved'])})</span>"),
             ("replayed calls", _e(spend["replays"])),
             ("certificate", verified)]
    return '<div class="cards">' + "".join(
        f'<div class="card">{label}<b>{value}</b></div>' for label, value in cards) + "</div>"


def _cell(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return '<span class="none">–</span>'
    moved = (f'<br><span class="cost">from {_e(cell["replayed_from"])}</span>'
             if cell.get("replayed_from") else "")
    return f'{_outcome(cell["outcome"])} <span class="cost">{_money(cell["cost"])}</span>{moved}'


def _matrix(view: dict[str, Any]) -> str:
    revisions = view["revisions"]
    head = ["identity", "capability",
            *(f"revision {r['revision']}<br>{_status(r['status'])}" for r in revisions),
            "committed result"]
    rows = [[f"<code>{_e(row['identity'])}</code>", _e(row["capability"]),
             *(_cell(row["cells"].get(r["revision"])) for r in revisions),
             ("" if row["committed_by"] is None else
              f"rev {row['committed_by']}: <code>{_e(row['result'])}</code>")]
            for row in view["matrix"]]
    if not rows:
        return "<p class='none'>No revision reached a capability call.</p>"
    return _table(head, rows)


def _revisions(view: dict[str, Any]) -> str:
    rows = []
    for r in view["revisions"]:
        calls = r.get("calls") or {}
        error = r.get("error")
        rows.append([_e(r["revision"]), _status(r["status"]), f"<code>{_e(r['source_digest'][:12])}"
                     "</code>",
                     *(_e(calls.get(k, 0)) for k in ("executed", "replayed", "failed",
                                                     "denied")),
                     _money(r["cost"]),
                     "" if not error else f"<b>{_e(error.get('type'))}</b>"
                     + (f" at <code>{_e(error['identity'])}</code>" if error.get("identity")
                        else "") + f": {_e(error.get('message'))}"])
    return _table(["rev", "status", "source", "executed", "replayed", "failed", "denied",
                   "cost", "error"], rows)


def _counterexamples(view: dict[str, Any]) -> str:
    items = view["counterexamples"]
    if not items:
        refused = len(view.get("refused_candidates") or [])
        return ("<p class='none'>The gate refused no revision"
                + (f"; {refused} repair candidate(s) were refused before they became "
                   "revisions (below).</p>" if refused else ".</p>"))
    rows = []
    for ce in items:
        candidate = (f"line {_e(ce.get('line'))}: <code>{_e(ce['source'])}</code>"
                     if ce.get("source") else '<span class="none">not in the candidate</span>')
        committed = (f"revision {_e(ce['committed_revision'])}, line "
                     f"{_e(ce.get('committed_line'))}: <code>{_e(ce['committed_source'])}</code>"
                     if ce.get("committed_source") else "")
        rows.append([_e(ce["revision"]), _e(ce["kind"]), f"<code>{_e(ce['site'])}</code>",
                     candidate, committed])
    return _table(["rev", "counterexample", "frozen site", "the candidate has",
                   "committed as"], rows)


def _refused_candidates(view: dict[str, Any]) -> str:
    items = view.get("refused_candidates") or []
    if not items:
        return "<p class='none'>No repair candidate was refused.</p>"
    rows = [[_e(c["time"][11:19]), _e(c["attempt"]), _e(c["stage"]),
             _e(", ".join(c["rules"]) or ", ".join(c["counterexamples"]) or ""),
             _e(c["message"])] for c in items]
    return _table(["time", "candidate", "refused by", "rules or counterexamples", "what"],
                  rows)


def _relocations(view: dict[str, Any]) -> str:
    rows = [[_e(rev["revision"]), f"<code>{_e(r['from'])}</code>",
             f"<code>{_e(r['to'])}</code>", _e(r.get("committed_line") or ""),
             _e(r.get("line") or "")]
            for rev in view["revisions"] for r in rev.get("relocations") or []]
    if not rows:
        return "<p class='none'>No call site moved: every committed call replays where it " \
               "was written.</p>"
    return ("<p>Each moved call site's committed calls replay at its new place when the "
            "payload is the same.</p>"
            + _table(["rev", "committed at", "now at", "old line", "new line"], rows))


def _attempts(view: dict[str, Any]) -> str:
    items = view["attempts_open"]
    if not items:
        return "<p class='none'>No unresolved attempt: nothing waits for an operator.</p>"
    parts = []
    for a in items:
        commands = "\n".join(a.get("commands", []))
        parts.append(f"<p>attempt #{_e(a['number'])} at <code>{_e(a['identity'])}</code> is "
                     f"<b>{_e(a['status'])}</b> (owner <code>{_e(a['owner'])}</code>). "
                     "Decide with one of:</p>" f"<pre>{_e(commands)}</pre>")
    return "".join(parts)


def _certificate(view: dict[str, Any]) -> str:
    cert = view["certificate"]
    if cert is None:
        return "<p class='none'>No certificate yet: no revision finished.</p>"
    verdict = ('<span class="ok">verified</span>: the hash chain recomputed from the store '
               'equals the persisted one' if not cert["differences"] else
               '<span class="bad">differs</span> from the store')
    rows = [[_e(d["kind"]), _e(d["site"]), _e(d["path"]), _e(d["occurrence"])]
            for d in cert["differences"]]
    return (f"<p>{verdict}. Revision {_e(cert['revision'])}, {_e(cert['entries'])} entries, "
            f"digest <code>{_e(cert['persisted_digest'])}</code>.</p>"
            + (_table(["difference", "site", "path", "occurrence"], rows) if rows else ""))


def _artifacts(view: dict[str, Any]) -> str:
    items = view.get("artifacts") or []
    if not items:
        return "<p class='none'>No committed call produced an artifact.</p>"
    figures = []
    for art in items:
        picture = (f"<img src=\"{_e(art['data_uri'])}\" alt=\"{_e(art['identity'])}\">"
                   if art.get("data_uri") else
                   "<p class='none'>not embedded" + (" (missing from the artifact store)"
                                                    if art.get("missing") else "") + "</p>")
        figures.append(
            f"<figure>{picture}<figcaption><code>{_e(art['identity'])}</code><br>"
            f"{_e(art.get('media_type'))}, {_e(art.get('bytes'))} B<br>"
            f"<code>{_e(art['fetch'])}</code></figcaption></figure>")
    return f"<div class='figs'>{''.join(figures)}</div>"


def _events(view: dict[str, Any]) -> str:
    rows = [[_e(e["time"][:19].replace("T", " ")), _e(e["revision"] or ""), _e(e["kind"]),
             f"<code>{_e(e['identity'] or '')}</code>", _e(e["message"])]
            for e in view["events"][-40:]]
    return _table(["time", "rev", "event", "identity", "message"], rows)


def render_html(view: dict[str, Any], *, now: datetime | None = None) -> str:
    """The page for ``report_view(store, run_id)``."""
    run = view["run"]
    when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC")
    detail = f" — {_e(run['detail'])}" if run.get("detail") else ""
    sections = [
        ("Spend", _cards(view)),
        ("Revisions side by side", _matrix(view)),
        ("Artifacts", _artifacts(view)),
        ("Revisions", _revisions(view)),
        ("Gate counterexamples", _counterexamples(view)),
        ("Refused repair candidates", _refused_candidates(view)),
        ("Relocated call sites", _relocations(view)),
        ("Unresolved attempts", _attempts(view)),
        ("Certificate", _certificate(view)),
        ("Events", _events(view)),
    ]
    body = "".join(f"<h2>{title}</h2>{html}" for title, html in sections)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>Revise run {_e(run['run_id'])}</title>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<style>{_CSS}</style></head><body>"
            f"<h1>Run {_e(run['run_id'])}: {_status(run['status'])}{detail}</h1>"
            f"<p class='sub'>created {_e(run['created_at'][:19].replace('T', ' '))}; report "
            f"written {when}</p>{body}</body></html>\n")

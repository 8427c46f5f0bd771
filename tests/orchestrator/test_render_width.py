"""What a person reads at 80 columns (issue 29, item 5): identities and run ids are
folded, never cut, so rows stay distinct; prose (details, results, messages) keeps to
one line; nothing is wider than the terminal."""

from __future__ import annotations

from datetime import UTC, datetime

from rich.console import Console

from broker.records import RunRecord, RunStatus
from broker.syntax import parse_python
from orchestrator import render
from orchestrator.sites import assign_sites

WIDTH = 80
# Identities as a fanout makes them: alike up to the path element and the occurrence.
IDENTITIES = [f"generate_all_the_product_shots.image_generate@{n}/{n % 3}:{n % 2}"
              for n in range(6)]


def _console() -> Console:
    return Console(width=WIDTH, record=True, force_terminal=False, color_system=None)


def _column(text: str, index: int) -> str:
    """Every fragment of one table column, in order, joined (a folded cell continues
    on the next line with the other cells empty)."""
    cells = [line.split("│")[index + 1].strip() for line in text.splitlines()
             if line.count("│") >= index + 2]
    return "".join(cells)


def _show_data() -> dict:
    now = "2026-12-04T12:00:00+00:00"
    return {
        "run": {"run_id": "shots", "status": "failed", "detail": "x" * 300},
        "spend": {"attempts": 6, "succeeded": 5, "cost": 0.24, "replays": 0},
        "revisions": [{"revision": 1, "status": "failed", "source_digest": "ab" * 32,
                       "calls": {"executed": 5, "failed": 1}, "cost": 0.24}],
        "slots": [{"identity": i, "capability": "image.generate", "revision": 1,
                   "result_summary": "a long summary of the result " * 5}
                  for i in IDENTITIES],
        "artifacts": [], "attempts_open": [],
        "events": [{"time": now, "revision": 1, "kind": "attempt_failed", "identity": i,
                    "message": "the provider answered 500 after charging " * 4}
                   for i in IDENTITIES],
    }


def test_show_keeps_every_identity_whole_at_80_columns() -> None:
    console = _console()
    render.show(console, _show_data())
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    slots = text[text.index("committed identity"):text.index("time")]
    assert _column(slots, 0).removeprefix("committed identity") == "".join(IDENTITIES)
    events = text[text.index("time"):]
    assert _column(events, 3).removeprefix("identity") == "".join(IDENTITIES)
    assert "…" in slots  # the result summaries are cut, one line each


def test_runs_keeps_run_ids_whole_and_details_on_one_line() -> None:
    at = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    ids = [f"nightly-product-shoot-for-the-spring-catalogue-{n}" for n in range(3)]
    items = [RunRecord(run_id, RunStatus.FAILED, at, at, 2,
                       "SandboxError: the script raised ValueError " * 8) for run_id in ids]
    console = _console()
    render.runs(console, items)
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= WIDTH
    assert _column(text, 0).removeprefix("run") == "".join(ids)
    body = [line for line in lines if line.startswith("│")][1:]
    assert len(body) <= 2 * len(ids), "a detail wrapped over several lines"


def test_a_run_report_and_the_sites_keep_every_identity_whole() -> None:
    """They were cut with an ellipsis: a fanout's identities, alike up to the path, read
    as one row repeated."""
    report = {"run_id": "shots", "revision": 1, "status": "succeeded", "result": None,
              "calls": {"executed": 6, "succeeded": 6, "failed": 0, "replayed": 0,
                        "denied": 0},
              "gate": {}, "error": None, "certificate": None,
              "identities": [{"site": i.split("@")[0], "path": [i.split("@")[1][0]],
                              "occurrence": int(i[-1]), "capability": "image.generate",
                              "outcome": "executed"} for i in IDENTITIES]}
    console = _console()
    render.run_report(console, report)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    shown = _column(text, 0).removeprefix("identity")
    assert shown == "".join(f"{i.split('@')[0]}@{i.split('@')[1][0]}:{i[-1]}"
                            for i in IDENTITIES)
    helpers = [f"generate_all_the_product_shots_for_the_catalogue_{n}" for n in range(3)]
    script = "async def orchestrate(ctx, args):\n" + "".join(
        f"    async def {h}():\n        return await ctx.run('image.generate', {{}})\n"
        for h in helpers) + "".join(f"    await {h}()\n" for h in helpers)
    sites = assign_sites(parse_python(script))
    assert len(sites) == 3
    console = _console()
    render.sites(console, sites)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= WIDTH
    assert _column(text, 0).removeprefix("site") == "".join(s.site for s in sites)

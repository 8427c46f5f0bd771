"""`revise run` without --json: a relocated replay says which committed result it got.

v1 fans out six shots (the fourth size is rejected). The repair's args move the dog to
the front and give the second shot a new prompt: the call at path [0] replays the dog
committed at path [1], and the cat committed at path [0] is reached by no call (an
orphan). The JSON says so (``replayed_from``); the human report printed the row
"...@0:0  replayed" and then "orphan: ...@0:0", which reads as the cat both returned
and unused. It must name where the replayed result came from.
"""

from __future__ import annotations

from rich.console import Console

from broker.envelope import Envelope
from orchestrator import render

from .conftest import Harness
from .test_moved_aside_report import ARGS, SWAPPED, V1, V2


def test_the_human_report_names_where_a_relocated_replay_came_from(harness: Harness) -> None:
    assert harness.pipeline.run("run-1", V1, ARGS, Envelope()).to_json()["status"] == "failed"
    report = harness.pipeline.run("run-1", V2, SWAPPED, Envelope()).to_json()
    assert report["status"] == "succeeded", report["error"]
    (moved,) = [i for i in report["identities"] if i["replayed_from"]]
    orphan = report["orphans"][0]["identity"]
    console = Console(width=200, record=True, force_terminal=False, color_system=None)
    render.run_report(console, report)
    text = console.export_text()
    assert f"orphan: {orphan}" in text
    call = f"{moved['site']}@{'.'.join(map(str, moved['path']))}:{moved['occurrence']}"
    assert any(call in line and moved["replayed_from"] in line
               for line in text.splitlines()), text

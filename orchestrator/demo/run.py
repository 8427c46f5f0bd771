"""`revise demo`: the four-shot story on the embedded default, end to end."""

from __future__ import annotations

import secrets
from importlib.resources import files
from typing import Any

from rich.console import Console

from broker.envelope import Envelope
from orchestrator import render

SHOTS = ["a lighthouse at dawn", "waves on black rocks", "a gull over the pier",
         "fog rolling over the harbour"]


def script(name: str) -> str:
    return files("orchestrator.demo").joinpath(f"{name}.script").read_text(encoding="utf-8")


def _say(console: Console | None, text: str) -> None:
    if console is not None:
        console.print(text)


def run_demo(services: Any, console: Console | None) -> dict[str, Any]:
    """Run v1 (fails at shot 4), the repair (replays 3, executes 1), then a relocation."""
    pipeline = services.pipeline()
    run_id = f"demo-{secrets.token_hex(4)}"
    args = {"shots": SHOTS}
    envelope = Envelope()
    _say(console, f"[bold]Revise demo[/] on run [bold]{run_id}[/] ({pipeline.runner.kind} "
                  "sandbox, local provider)\n")
    _say(console, "[bold]1.[/] The model's script asks for four images in parallel; the "
                  "fourth uses an unsupported size.")
    first = pipeline.run(run_id, script("scout_v1"), args, envelope)
    if console:
        render.run_report(console, first)
    _say(console, "\n[bold]2.[/] The repair fixes the size list outside the call expression "
                  "and runs on the same run id.")
    repair = pipeline.run(run_id, script("scout_repaired"), args, envelope)
    if console:
        render.run_report(console, repair)
    _say(console, "\n[bold]3.[/] Another candidate moves the committed call into a helper.")
    moved = pipeline.run(run_id, script("scout_relocated"), args, envelope)
    if console:
        render.run_report(console, moved)
    ours = first["calls"]["executed"] + repair["calls"]["executed"] + \
        moved["calls"]["executed"]
    rerun = first["calls"]["executed"] + len(SHOTS)
    _say(console, f"\n[bold]Spend[/]: {ours} provider calls for the episode; a full rerun of "
                  f"the repaired script would make {rerun}. The relocation was stopped before "
                  "any container started and spent nothing.")
    ok = (first["status"] == "failed" and repair["status"] == "succeeded"
          and repair["calls"]["replayed"] == 3 and repair["calls"]["executed"] == 1
          and moved["status"] == "stopped" and moved["calls"]["executed"] == 0)
    return {"ok": ok, "run_id": run_id, "sandbox": pipeline.runner.kind,
            "provider_calls": ours, "full_rerun_calls": rerun,
            "runs": {"first": first, "repair": repair, "relocation": moved}}

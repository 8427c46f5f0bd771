"""`revise demo`: the four-shot story on the embedded default, end to end.

1. The model's script asks for four images in parallel; the fourth fails.
2. The real repair loop (as ``revise repair --execute`` runs it) asks a
   (recorded) model for a candidate: the first one writes the new size into the
   committed call expression, and the gate stops it before any container starts
   (those three images were made with another call); the counterexample goes
   back to the model, whose second candidate fixes the size outside the call and
   also moves the call into a top-level helper, which the gate relocates (the
   moved call is the only match, and the sizes that reached the committed calls
   are unchanged).
3. The loop runs the accepted candidate on the same run id: 3 calls replayed
   through the relocation, 1 executed.
"""

from __future__ import annotations

import secrets
from importlib.resources import files
from typing import Any

from rich.console import Console

from broker.envelope import Envelope
from orchestrator import render
from orchestrator.models import RecordedBackend, parse_jsonl
from orchestrator.repair import RepairResult, repair_dynamic_source

SHOTS = ["a lighthouse at dawn", "waves on black rocks", "a gull over the pier",
         "fog rolling over the harbour"]


def script(name: str) -> str:
    return files("orchestrator.demo").joinpath(f"{name}.script").read_text(encoding="utf-8")


def recorded_model() -> RecordedBackend:
    """The demo's model: two recorded repair answers (an edited committed call, then the
    size fixed outside the call, with the call moved into a helper)."""
    text = files("orchestrator.demo").joinpath("repair.jsonl").read_text(encoding="utf-8")
    return RecordedBackend(parse_jsonl(text, "orchestrator/demo/repair.jsonl"),
                           source="orchestrator/demo/repair.jsonl")


def _say(console: Console | None, text: str) -> None:
    if console is not None:
        console.print(text)


def _show_loop(console: Console | None, result: RepairResult) -> None:
    for attempt in result.attempts:
        if attempt.accepted:
            _say(console, f"  candidate {attempt.attempt}: [green]accepted[/] by the checker, "
                          "the gate and the call-count guard, then run on the same run id "
                          f"(spent {attempt.spend:g})")
            continue
        _say(console, f"  candidate {attempt.attempt}: [red]refused[/] by "
                      f"{', '.join(attempt.refused_by)} (no container started, nothing spent)")
        for ce in attempt.counterexamples:
            _say(console, f"    {ce.kind} {render.escape(ce.site)}: fed back to the model "
                          "with its committed source line")


def run_demo(services: Any, console: Console | None) -> dict[str, Any]:
    """Run v1 (fails at shot 4), repair it with the real loop, execute the accepted candidate."""
    pipeline = services.pipeline()
    run_id = f"demo-{secrets.token_hex(4)}"
    args = {"shots": SHOTS}
    envelope = Envelope()
    _say(console, f"[bold]Revise demo[/] on run [bold]{run_id}[/] ({pipeline.runner.kind} "
                  "sandbox, local provider, recorded model)\n")
    _say(console, "[bold]1.[/] The model's script asks for four images in parallel; the "
                  "fourth uses an unsupported size.")
    first = pipeline.run(run_id, script("scout_v1"), args, envelope).to_json()
    if console:
        render.run_report(console, first)
    _say(console, "\n[bold]2.[/] The repair loop asks the model for a candidate and judges "
                  "it before anything runs.")
    model = recorded_model()

    def execute(text: str) -> dict[str, Any]:
        return pipeline.run(run_id, text, args, envelope).to_json()

    loop = repair_dynamic_source(store=services.store, run_id=run_id, model=model,
                                 max_attempts=3, args=args,
                                 relocation=str(services.settings.relocation),
                                 execute=execute)
    _show_loop(console, loop)
    repair = loop.run
    if repair is not None:
        _say(console, "\n[bold]3.[/] The accepted candidate ran on the same run id.")
        if console:
            render.run_report(console, repair)
            for moved in repair["gate"]["relocations"]:
                _say(console, f"  relocated: {render.escape(moved['from'])} (line "
                              f"{moved['committed_line']}) → {render.escape(moved['to'])} "
                              f"(line {moved['line']}); replayed only on an equal payload")
    executed = first["calls"]["executed"] + (repair["calls"]["executed"] if repair else 0)
    rerun = first["calls"]["executed"] + len(SHOTS)
    gate_stops = sum(1 for a in loop.attempts if "gate" in a.refused_by)
    _say(console, f"\n[bold]Spend[/]: {executed} provider calls for the episode; a full rerun "
                  f"of the repaired script would make {rerun}. The gate stopped {gate_stops} "
                  "candidate(s) before any container started; they spent nothing.")
    fed_back = len(model.calls) > 1 and any(
        ce.site in model.calls[1].messages[-1]["content"]
        for ce in loop.attempts[0].counterexamples)
    ok = (first["status"] == "failed" and loop.accepted and gate_stops >= 1 and fed_back
          and repair is not None and repair["status"] == "succeeded"
          and bool(repair["gate"]["relocations"])
          and repair["calls"]["replayed"] == 3 and repair["calls"]["executed"] == 1)
    return {"ok": ok, "run_id": run_id, "sandbox": pipeline.runner.kind,
            "provider_calls": executed, "full_rerun_calls": rerun,
            "replayed": repair["calls"]["replayed"] if repair else 0,
            "executed": repair["calls"]["executed"] if repair else 0,
            "rewrites": loop.rewrites, "gate_stops": gate_stops,
            "repair_loop": loop.to_json(),
            "runs": {"first": first, "repair": repair}}

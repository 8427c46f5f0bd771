"""A model answer with the whole repaired script, then an abbreviated excerpt of it.

Models often follow the complete fix with a short recap of "the key change": the
changed constant and the entry point with its body elided (``...  # unchanged``).
Both blocks define ``orchestrate``; the excerpt is last. The answer holds an
admissible script, so the round must judge that one: taking the excerpt (no
capability call at all) refuses the round (gate: every committed call "removed",
call-count guard: 0 calls) and, with one round, ends the repair with no candidate.
"""

from __future__ import annotations

from pathlib import Path

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from orchestrator.models.extract import extract_script
from orchestrator.models.recorded import RecordedBackend
from orchestrator.repair import repair_dynamic_source
from sandbox.runner import ProcessRunner

V1 = '''SIZES = ["1024x1024", "1024x1024", "1024x1024", "999x999", "1024x1024", "1024x1024"]


async def orchestrate(ctx, args):
    out = []
    for i in range(6):
        img = await ctx.run("image.generate", {"prompt": args["shots"][i], "size": SIZES[i]})
        out.append(img["artifact"]["id"])
    return out
'''
FIXED = V1.replace('"999x999"', '"1024x1024"')
ARGS = {"shots": ["a cat", "a dog", "a fox", "an owl", "a bee", "a cow"]}
EXCERPT = ('SIZES = ["1024x1024", "1024x1024", "1024x1024", "1024x1024", "1024x1024", '
           '"1024x1024"]\n\n\nasync def orchestrate(ctx, args):\n    ...  # unchanged\n')
ANSWER = (f"The fourth size is not supported. Here is the corrected script:\n\n```python\n"
          f"{FIXED}```\n\nThe only change is the size list; in short:\n\n```python\n"
          f"{EXCERPT}```\n\nEverything else stays as it was.")


def test_the_whole_script_is_taken_over_a_later_excerpt() -> None:
    assert extract_script(ANSWER, failed=V1) == FIXED


def test_a_repair_answer_ending_with_an_excerpt_is_judged_on_its_whole_script(
        tmp_path: Path) -> None:
    services = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS))
    services.runner = ProcessRunner()
    try:
        pipeline = services.pipeline()
        first = pipeline.run("run-1", V1, ARGS, Envelope()).to_json()
        assert first["status"] == "failed" and first["calls"]["succeeded"] == 3
        result = repair_dynamic_source(
            store=services.store, run_id="run-1", model=RecordedBackend.of(ANSWER),
            max_attempts=1,
            execute=lambda text: pipeline.run("run-1", text, ARGS, Envelope()).to_json())
    finally:
        services.close()
    (round_,) = result.attempts
    assert round_.accepted, (round_.refused_by, round_.candidate)
    assert result.outcome == "succeeded"
    assert result.run is not None and result.run["calls"]["replayed"] == 3
    assert result.run["calls"]["executed"] == 3

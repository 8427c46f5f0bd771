"""An unfenced model answer that opens with a Markdown heading and a line of prose.

Models that skip the fence often still write Markdown around the code: a heading
(`## Fixed script`), a sentence, then the script. A heading looks like a Python
comment, so taking the text from it keeps the prose line after it, and the round is
refused for a syntax error at that prose line ("The fourth size was invalid; ...")
although the answer holds an admissible script the model is then told is broken.
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
ANSWER = ("## Fixed script\n\nThe fourth size was invalid; I replaced it with 1024x1024.\n\n"
          + FIXED)


def test_an_unfenced_answer_s_heading_and_prose_are_not_taken_as_code() -> None:
    assert extract_script(ANSWER, failed=V1) == FIXED


def test_a_repair_answer_with_a_heading_and_no_fence_is_judged_on_its_script(
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
    assert round_.accepted, (round_.refused_by, [v.message for v in round_.violations])
    assert result.outcome == "succeeded"
    assert result.run is not None and result.run["calls"]["replayed"] == 3

"""Repairs of the six-image script whose fourth size is refused, as a model answers them
and as a user asks for them.

* The whole repaired script, then a short recap of "the key change" with the body elided
  (``...  # unchanged``): both define ``orchestrate``, the excerpt last. Taking the
  excerpt (no call at all) refused the round: the whole script must be judged.
* No fence, but Markdown around the code: a heading (``## Fixed script``), a sentence,
  then the script. A heading looks like a comment; taken from there, the prose line
  after it was refused as a syntax error, and the model told its script was broken.
* `revise repair` while the first revision still runs: nothing has failed, the prefix is
  still growing and a candidate could not run (`RunBusy`). Refused before the model is
  asked (an answer costs money), never a candidate accepted against half a prefix.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import ReviseError
from broker.records import RevisionStatus
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import Services, open_services
from orchestrator.models.extract import extract_script
from orchestrator.models.recorded import RecordedBackend
from orchestrator.repair import RepairResult, repair_dynamic_source
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
WITH_EXCERPT = (f"The fourth size is not supported. Here is the corrected script:\n\n```python\n"
                f"{FIXED}```\n\nThe only change is the size list; in short:\n\n```python\n"
                f"{EXCERPT}```\n\nEverything else stays as it was.")
WITH_HEADING = ("## Fixed script\n\nThe fourth size was invalid; I replaced it with "
                "1024x1024.\n\n" + FIXED)


def _services(tmp_path: Path, **options: Any) -> Services:
    services = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                             **options)
    services.runner = ProcessRunner()
    return services


def _repaired(tmp_path: Path, answer: str) -> RepairResult:
    """The first run fails at its fourth shot; one round of repair with ``answer``."""
    services = _services(tmp_path)
    try:
        pipeline = services.pipeline()
        first = pipeline.run("run-1", V1, ARGS, Envelope()).to_json()
        assert first["status"] == "failed" and first["calls"]["succeeded"] == 3
        return repair_dynamic_source(
            store=services.store, run_id="run-1", model=RecordedBackend.of(answer),
            max_attempts=1,
            execute=lambda text: pipeline.run("run-1", text, ARGS, Envelope()).to_json())
    finally:
        services.close()


@pytest.mark.parametrize("answer", [WITH_EXCERPT, WITH_HEADING], ids=["excerpt", "heading"])
def test_the_whole_script_is_taken_from_the_answer(answer: str) -> None:
    assert extract_script(answer, failed=V1) == FIXED


@pytest.mark.parametrize("answer", [WITH_EXCERPT, WITH_HEADING], ids=["excerpt", "heading"])
def test_a_repair_answer_is_judged_on_its_whole_script(tmp_path: Path, answer: str) -> None:
    result = _repaired(tmp_path, answer)
    (round_,) = result.attempts
    assert round_.accepted, (round_.refused_by, [v.message for v in round_.violations])
    assert result.outcome == "succeeded"
    assert result.run is not None
    assert (result.run["calls"]["replayed"], result.run["calls"]["executed"]) == (3, 3)


def test_repair_of_a_running_revision_is_refused_before_the_model_is_asked(
        tmp_path: Path) -> None:
    release = threading.Event()
    reached = threading.Event()

    def latency(capability: str, payload: dict[str, Any]) -> float:
        if payload.get("prompt") == "a fox":  # the third shot holds the revision running
            reached.set()
            assert release.wait(60), "the test never released the first revision"
        return 0.0

    services = _services(tmp_path, latency=latency)
    reports: list[dict[str, Any]] = []
    first = threading.Thread(target=lambda: reports.append(
        services.pipeline().run("run-1", V1, ARGS, Envelope()).to_json()))
    first.start()
    try:
        assert reached.wait(60), "the first revision never reached its third call"
        (running,) = services.store.list_revisions("run-1")
        assert running.status is RevisionStatus.RUNNING

        model = RecordedBackend.of(f"```python\n{FIXED}```\n")
        with pytest.raises(ReviseError) as refused:
            result = repair_dynamic_source(store=services.store, run_id="run-1", model=model,
                                           max_attempts=1)
            pytest.fail(f"a repair of a running revision went ahead: outcome "
                        f"{result.outcome!r}, model asked {len(model.calls)} time(s)")
        assert model.calls == [], "the model was asked to repair a run that had not failed"
        assert "running" in refused.value.message and "1" in refused.value.message
    finally:
        release.set()
        first.join(60)
        services.close()
    assert reports and reports[0]["status"] == "failed"

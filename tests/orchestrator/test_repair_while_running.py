"""`revise repair` on a run whose latest revision is still running.

A user (or a script that polls `revise runs`) asks for a repair while the first
revision is still paying for its calls. Nothing has failed yet: there is no failure
to show the model, the committed prefix is still growing, and a candidate could not
run anyway (one revision of a run runs at a time: `RunBusy`). The repair must be
refused before the model is asked (a model answer costs money), naming the running
revision, the way `revise run` refuses it; it must not report a candidate as
accepted, judged against a prefix that is still being written.
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
from orchestrator.embedded import open_services
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


def test_repair_of_a_running_revision_is_refused_before_the_model_is_asked(
        tmp_path: Path) -> None:
    release = threading.Event()
    reached = threading.Event()

    def latency(capability: str, payload: dict[str, Any]) -> float:
        if payload.get("prompt") == "a fox":  # the third shot holds the revision running
            reached.set()
            assert release.wait(60), "the test never released the first revision"
        return 0.0

    services = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                             latency=latency)
    services.runner = ProcessRunner()
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

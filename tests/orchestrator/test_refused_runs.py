"""No refusal leaves a run `running` (issue 28, item 4): a candidate the checker or the
gate refuses ends its revision `stopped`, and the run with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope
from broker.records import RunStatus
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner
from tests.crash.kit import settings_for

CHECKER_REFUSES = "import os\nasync def orchestrate(ctx, args):\n    return 1\n"
V1 = ('async def orchestrate(ctx, args):\n'
      '    a = await ctx.run("text.generate", {"prompt": "one"})\n'
      '    raise RuntimeError("later")\n')
GATE_REFUSES = ('async def orchestrate(ctx, args):\n'
                '    a = await ctx.run("text.generate", {"prompt": "two"})\n'
                '    return a\n')


def test_a_refused_first_revision_and_a_refused_repair_stop_their_run(tmp_path: Path
                                                                      ) -> None:
    services = open_services(settings_for(tmp_path), runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        report = pipeline.run("refused", CHECKER_REFUSES, {}, Envelope())
        assert report.to_json()["status"] == "stopped"
        run = services.store.get_run("refused")
        assert run.status is RunStatus.STOPPED and "checker rejected" in run.detail
        pipeline.run("gated", V1, {}, Envelope())
        assert services.store.get_run("gated").status is RunStatus.FAILED
        repair = pipeline.run("gated", GATE_REFUSES, {}, Envelope()).to_json()
        assert repair["error"]["type"] == "GateRejected"
        assert services.store.get_run("gated").status is RunStatus.STOPPED
    finally:
        services.close()


def test_a_sandbox_that_cannot_start_ends_its_revision_and_run(tmp_path: Path) -> None:
    """A launch failure (here: no bubblewrap where the settings point) used to escape the
    session and leave the revision and the run `running`; it now ends them `stopped`."""
    from sandbox.process_profile import ProcessSettings

    runner = ProcessRunner(settings=ProcessSettings(bwrap=tmp_path / "no-such-bwrap"))
    services = open_services(settings_for(tmp_path), runner=runner)
    try:
        report = services.pipeline().run("unstarted", V1, {}, Envelope()).to_json()
        assert report["status"] == "stopped", report
        assert report["error"]["type"] == "SandboxUnavailable"
        assert report["calls"]["executed"] == 0
        assert services.store.get_run("unstarted").status is RunStatus.STOPPED
        (revision,) = services.store.list_revisions("unstarted")
        assert revision.status == "stopped"
    finally:
        services.close()


def test_a_fault_on_the_host_fails_an_embedded_revision_and_the_repair_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fault no handler foresaw, after the calls were paid (here: the store's facts of the
    revision cannot be read back), used to escape with a traceback and leave the revision
    and the run `running` until a later submit swept them. The revision is now failed,
    naming the fault and where it was raised, and the next submit replays what was paid."""
    from broker.errors import RevisionLost

    services = open_services(settings_for(tmp_path), runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        with monkeypatch.context() as patch:
            def unreadable(run_id: str, revision: int) -> None:
                raise ValueError("a stored row cannot be decoded")

            patch.setattr(services.store, "revision_facts", unreadable)
            with pytest.raises(RevisionLost) as lost:
                pipeline.run("faulted", V1, {}, Envelope())
        assert "ValueError at test_refused_runs.py:" in lost.value.message
        assert "a stored row cannot be decoded" in lost.value.message
        (revision,) = services.store.list_revisions("faulted")
        assert revision.status == "failed", revision
        assert revision.summary["error"]["type"] == "RevisionLost"
        run = services.store.get_run("faulted")
        assert run.status is RunStatus.FAILED and "host failed" in run.detail
        repair = pipeline.run("faulted", V1.replace('raise RuntimeError("later")',
                                                    "return a"), {}, Envelope()).to_json()
        assert repair["status"] == "succeeded", repair
        assert repair["calls"]["replayed"] == 1 and repair["calls"]["executed"] == 0
    finally:
        services.close()

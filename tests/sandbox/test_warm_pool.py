"""Warm sandboxes: pre-started, one per job, never reused across runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope, SandboxLimits
from broker.settings import SandboxKind
from orchestrator.embedded import open_services

pytestmark = pytest.mark.docker

SCRIPT = ('async def orchestrate(ctx, args):\n'
          '    return await ctx.run("text.generate", {"prompt": args["p"]})\n')


def test_each_job_gets_its_own_prestarted_container(sandbox_settings, tmp_path: Path) -> None:
    from sandbox.docker_runner import DockerRunner

    settings = sandbox_settings.model_copy(update={"home": tmp_path / "home",
                                                   "sandbox": SandboxKind.DOCKER})
    runner = DockerRunner(settings, warm=2)
    used: list[str] = []
    start = runner.start

    def recording_start(job):
        sandbox = start(job)
        used.append(sandbox.container_id)
        return sandbox

    runner.start = recording_start  # type: ignore[method-assign]
    services = open_services(settings, runner=runner)
    try:
        pipeline = services.pipeline()
        reports = [pipeline.run(f"warm-{i}", SCRIPT, {"p": f"job {i}"}, Envelope()).to_json()
                   for i in range(3)]
        odd = pipeline.run("cold", SCRIPT, {"p": "cold"},
                           Envelope(sandbox=SandboxLimits(memory_mb=256))).to_json()
    finally:
        runner.close()
        services.close()
    assert [r["status"] for r in reports] == ["succeeded"] * 3
    assert odd["status"] == "succeeded"  # other limits: started cold
    assert len(set(used)) == 4, "a container is never reused across runs"
    from sandbox.docker_runner import LABEL_RUN
    from sandbox.warm_pool import WARM_RUN

    left = runner.client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={WARM_RUN}"})
    assert left == [], "closing the pool removes its idle containers"

"""One language table: every builtin name the checker lets a script use exists in both
sandboxes (a name the checker admits and the sandbox lacks fails a checked run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.checker import check
from orchestrator.embedded import open_services
from sandbox import language


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def services(request, tmp_path: Path):
    if request.param == "docker":
        from sandbox.docker_runner import DockerRunner

        base = request.getfixturevalue("sandbox_settings")
        settings = base.model_copy(update={"home": tmp_path / "home",
                                           "sandbox": SandboxKind.DOCKER})
        runner = DockerRunner(settings)
    else:
        from sandbox.runner import ProcessRunner

        settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
        runner = ProcessRunner()
    opened = open_services(settings, runner=runner)
    yield opened
    opened.close()


def every_builtin_script() -> str:
    names = sorted(language.BUILTIN_NAMES)
    lines = ["async def orchestrate(ctx, args):", "    seen = []"]
    for name in names:
        lines += [f"    value = {name}", f"    seen.append({name!r})"]
    lines.append("    return seen")
    return "\n".join(lines) + "\n"


def test_the_sandbox_gives_a_script_exactly_the_language_builtins(services) -> None:
    text = every_builtin_script()
    assert check(text).valid, check(text).violations
    report = services.pipeline().run("names", text, {}, Envelope()).to_json()
    assert report["status"] == "succeeded", report["error"]
    assert report["result"] == sorted(language.BUILTIN_NAMES)

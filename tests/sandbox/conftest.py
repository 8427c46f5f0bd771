"""Sandbox fixtures: a running Docker engine and a current sandbox image, once per
session; fresh RPC directories; probes run through either runner.

When no engine answers, ``sandbox/engine.sh`` is run (as root it installs and
starts one); if there is still none, Docker tests skip locally and fail in CI.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import SandboxLimits
from broker.settings import SandboxKind, Settings

REPO = Path(__file__).resolve().parents[2]
ENGINE_SH = REPO / "sandbox" / "engine.sh"


def _missing_engine(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required in CI)")
    pytest.skip(reason)


def _ping() -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except DockerException:
        return None


@pytest.fixture(scope="session")
def docker_client() -> Any:
    client = _ping()
    if client is None and os.geteuid() == 0:
        proc = subprocess.run(["bash", str(ENGINE_SH)], capture_output=True, text=True,
                              timeout=900)
        if proc.returncode != 0:
            _missing_engine(f"sandbox/engine.sh could not start Docker: {proc.stderr[-800:]}")
        client = _ping()
    if client is None:
        _missing_engine("no Docker engine answers (run: sudo bash sandbox/engine.sh)")
    yield client
    client.close()


@pytest.fixture(scope="session")
def sandbox_settings(docker_client, tmp_path_factory) -> Settings:
    """Settings with a private REVISE_HOME whose pin names the current image."""
    from sandbox.image import ensure_image

    settings = Settings(home=tmp_path_factory.mktemp("revise-home"))

    def progress(line: str) -> None:
        sys.stderr.write(f"[sandbox image] {line}\n")

    ensure_image(settings, progress=progress, client=docker_client)
    return settings


@pytest.fixture
def process_services(tmp_path: Path) -> Any:
    """Embedded services on a fresh home with the process sandbox."""
    from orchestrator.embedded import open_services
    from sandbox.runner import ProcessRunner

    runner = ProcessRunner()
    runner.check()
    opened = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                           runner=runner)
    yield opened
    opened.close()


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker)])
def embedded_services(request, tmp_path: Path) -> Any:
    """Embedded services on a fresh home, once with each sandbox."""
    from orchestrator.embedded import open_services

    if request.param == "docker":
        from sandbox.docker_runner import DockerRunner

        base = request.getfixturevalue("sandbox_settings")
        settings = base.model_copy(update={"home": tmp_path / "home",
                                           "sandbox": SandboxKind.DOCKER})
        runner: Any = DockerRunner(settings)
    else:
        from sandbox.runner import ProcessRunner

        settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
        runner = ProcessRunner()
    opened = open_services(settings, runner=runner)
    yield opened
    opened.close()


@pytest.fixture
def rpc_dirs(tmp_path) -> Callable[[], Path]:
    """Fresh, not yet existing RPC directory paths (``open_rpc_dir`` makes them)."""
    counter = iter(range(1_000_000))
    return lambda: tmp_path / f"rpc-{next(counter)}"


def _prober(runner_for: Callable[[Sequence[str]], Any], rpc_dirs: Callable[[], Path],
            default: Sequence[str], started: list[Any]) -> Callable[..., tuple]:
    def run(code: str, limits: SandboxLimits | None = None, *, timeout: float = 60,
            command: Sequence[str] | None = None) -> tuple[int | None, str, Any]:
        runner = runner_for(command or (*default, code))
        launched = runner.launch(f"test-{os.getpid()}", rpc_dirs(), limits or SandboxLimits())
        started.append(launched)
        code_ = launched.sandbox.wait(timeout)
        out = launched.sandbox.output()
        launched.sandbox.cleanup()
        launched.listener.close()
        return code_, out, launched.sandbox

    return run


@pytest.fixture
def run_probe(docker_client, sandbox_settings, rpc_dirs):
    """Run ``code`` with python3 in a sandbox container; return (exit code, output, sandbox)."""
    from sandbox.docker_runner import DockerRunner

    started: list[Any] = []
    yield _prober(lambda command: DockerRunner(sandbox_settings, client=docker_client,
                                               command=command),
                  rpc_dirs, ("python3", "-I", "-S", "-B", "-c"), started)
    for launched in started:
        launched.sandbox.cleanup()
        launched.listener.close()


@pytest.fixture(scope="session")
def process_python() -> str:
    from broker.errors import SandboxUnavailable
    from sandbox.runner import ProcessRunner

    try:
        runner = ProcessRunner()
        runner.check()
    except SandboxUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the process sandbox cannot be set up (required in CI): {exc}")
        pytest.skip(f"the process sandbox cannot be set up here: {exc}")
    return runner.profile(SandboxLimits()).python


@pytest.fixture
def run_process_probe(process_python, rpc_dirs):
    """Run ``code`` with the sandbox's Python in a bubblewrap sandbox (see run_probe)."""
    from sandbox.runner import ProcessRunner

    started: list[Any] = []
    yield _prober(lambda command: ProcessRunner(command=command), rpc_dirs,
                  (process_python, "-I", "-S", "-B", "-c"), started)
    for launched in started:
        launched.sandbox.cleanup()
        launched.listener.close()

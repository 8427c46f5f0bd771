"""Docker fixtures: a running engine and a current sandbox image, once per session.

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
from broker.settings import Settings
from sandbox.runner import SandboxJob

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
def make_job(tmp_path) -> Callable[..., SandboxJob]:
    """A job with its own job dir and RPC dir; limits default to the envelope's."""
    counter = iter(range(1_000_000))

    def make(limits: SandboxLimits | None = None, *, run_id: str = "",
             files: dict[str, str] | None = None) -> SandboxJob:
        n = next(counter)
        job_dir = tmp_path / f"job-{n}"
        rpc_dir = tmp_path / f"rpc-{n}"
        job_dir.mkdir()
        rpc_dir.mkdir()
        for name, text in (files or {}).items():
            (job_dir / name).write_text(text, encoding="utf-8")
        return SandboxJob(run_id or f"test-{os.getpid()}-{n}", job_dir, rpc_dir,
                          limits or SandboxLimits())

    return make


@pytest.fixture
def run_probe(docker_client, sandbox_settings, make_job):
    """Run ``code`` with python3 in a sandbox container; return (exit code, output, sandbox)."""
    from sandbox.docker_runner import DockerRunner

    started = []

    def run(code: str, limits: SandboxLimits | None = None, *, timeout: float = 60,
            command: Sequence[str] | None = None) -> tuple[int | None, str, Any]:
        job = make_job(limits)
        runner = DockerRunner(sandbox_settings, client=docker_client,
                              command=command or ("python3", "-I", "-S", "-B", "-c", code))
        sandbox = runner.start(job)
        started.append(sandbox)
        code_ = sandbox.wait(timeout)
        out = sandbox.output()
        sandbox.cleanup()
        return code_, out, sandbox

    yield run
    for sandbox in started:
        sandbox.cleanup()

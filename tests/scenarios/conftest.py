"""A harness that runs fixture scripts through the real embedded pipeline."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.providers import ProviderLog
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import Services, open_services
from sandbox.runner import ProcessRunner

SCRIPTS = Path(__file__).parent.parent / "fixtures" / "scripts"


def script(name: str) -> str:
    return (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")


class Harness:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.pipeline = services.pipeline()

    def run(self, name: str, *, run_id: str = "run-1", args: Any = None,
            envelope: Envelope | None = None) -> dict[str, Any]:
        return self.pipeline.run(run_id, script(name), args if args is not None else {},
                                 envelope or Envelope()).to_json()

    def provider_log(self) -> list[dict[str, Any]]:
        return ProviderLog(self.services.settings.provider_log_path).read()


def _runner(kind: str, settings: Settings):
    if kind == "process":
        return ProcessRunner()
    from sandbox.select import docker_ready

    if not docker_ready(settings):
        if os.environ.get("CI"):
            pytest.fail("REVISE docker sandbox is not ready in CI")
        pytest.skip("no Docker engine or sandbox image here")
    from sandbox.docker_runner import DockerRunner

    return DockerRunner(settings)


@pytest.fixture(params=["process", pytest.param("docker", marks=pytest.mark.docker),
                        pytest.param("process+postgresql", marks=pytest.mark.postgres)])
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    """The sandbox, and the store when it is not the embedded SQLite default."""
    return request.param


@pytest.fixture
def make_harness(tmp_path: Path, sandbox_kind: str,
                 request: pytest.FixtureRequest) -> Callable[..., Harness]:
    opened: list[Services] = []
    kind, _, database = sandbox_kind.partition("+")
    shared_url = request.getfixturevalue("postgres_url") if database == "postgresql" else None

    def make(*, latency: Any = None, home: str | None = None, **overrides: Any) -> Harness:
        """``home`` names a state directory; two harnesses on one home share the store."""
        settings = Settings(home=tmp_path / (home or f"home{len(opened)}"),
                            database_url=shared_url, sandbox=SandboxKind(kind), **overrides)
        services = open_services(settings, latency=latency)
        services.runner = _runner(kind, settings)
        opened.append(services)
        return Harness(services)

    yield make
    for services in opened:
        services.close()


@pytest.fixture
def harness(make_harness: Callable[..., Harness]) -> Harness:
    return make_harness()

"""Pick the sandbox runner from settings: Docker when an engine answers, else process."""

from __future__ import annotations

import logging

from broker.errors import SandboxUnavailable
from broker.settings import SandboxKind, Settings
from sandbox.runner import ProcessRunner, Runner

log = logging.getLogger("revise.sandbox")


def _docker_runner(settings: Settings) -> Runner:
    from sandbox.docker_runner import DockerRunner

    return DockerRunner(settings, warm=settings.sandbox_warm)


def docker_ready(settings: Settings) -> bool:
    try:
        import docker

        from sandbox.image import verify_image

        client = docker.from_env(timeout=5)
        client.ping()
        verify_image(client, settings)
        return True
    except Exception:  # any engine, socket or image problem means "not ready"
        return False


def _process_runner(reason: str) -> Runner:
    runner = ProcessRunner()
    log.warning("%s: %s", reason, runner.isolation)
    return runner


def select_runner(settings: Settings) -> Runner:
    """Docker when asked for (or, under auto, when ready); else the process sandbox,
    with one warning that its isolation is weaker."""
    if settings.sandbox is SandboxKind.PROCESS:
        return _process_runner("REVISE_SANDBOX=process")
    if settings.sandbox is SandboxKind.DOCKER:
        if not docker_ready(settings):
            raise SandboxUnavailable(
                "REVISE_SANDBOX=docker but no Docker engine answers or the sandbox image is "
                "missing; start the engine (bash sandbox/engine.sh) and run "
                "`revise sandbox build`, or set REVISE_SANDBOX=process")
        return _docker_runner(settings)
    if docker_ready(settings):
        return _docker_runner(settings)
    return _process_runner("no Docker engine or sandbox image")

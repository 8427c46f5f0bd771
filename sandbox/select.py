"""Pick the sandbox runner from settings, failing closed.

``docker``: the Docker runner, or SandboxUnavailable when no engine or image is
ready. ``process``: the bubblewrap sandbox, proven to set up here (else
SandboxUnavailable). ``process-weak`` (or ``REVISE_PROCESS_ISOLATION=weak``):
the rlimits-only child, only because the operator named it. ``auto``: Docker
when ready, else the bubblewrap sandbox, never the weak child. A Celery worker
consuming the sandbox queue does not fall back at all: ``check_sandbox_worker``
refuses ``auto`` without a ready Docker engine unless process mode is named.
"""

from __future__ import annotations

import logging

from broker.errors import SandboxUnavailable
from broker.settings import SandboxKind, Settings
from sandbox.process_profile import ProcessSettings
from sandbox.runner import ProcessRunner, Runner, WeakProcessRunner

log = logging.getLogger("revise.sandbox")

WEAK = SandboxKind.PROCESS_WEAK.value
_DOCKER_FIX = ("start the engine (bash sandbox/engine.sh) and run `revise sandbox build`")


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


def weak_named(settings: Settings, process: ProcessSettings) -> bool:
    """The operator named the weak child explicitly (auto never means it)."""
    return str(settings.sandbox) == WEAK or (
        settings.sandbox == SandboxKind.PROCESS and process.isolation == "weak")


def _weak_runner() -> Runner:
    runner = WeakProcessRunner()
    log.warning("!! %s", runner.warnings[0])
    return runner


def _process_runner(settings: Settings, process: ProcessSettings, reason: str) -> Runner:
    runner = ProcessRunner(settings=process, warm=settings.sandbox_warm)
    try:
        runner.check()
    except SandboxUnavailable:
        runner.close()
        raise
    log.warning("%s: %s; %s", reason, runner.isolation, runner.warnings[0])
    return runner


def select_runner(settings: Settings, *, process: ProcessSettings | None = None) -> Runner:
    """Docker when asked for (or, under auto, when ready); else the bubblewrap sandbox."""
    process = process or ProcessSettings()
    if weak_named(settings, process):
        return _weak_runner()
    if settings.sandbox == SandboxKind.PROCESS:
        return _process_runner(settings, process, "REVISE_SANDBOX=process")
    if settings.sandbox == SandboxKind.DOCKER:
        if not docker_ready(settings):
            raise SandboxUnavailable(
                "REVISE_SANDBOX=docker but no Docker engine answers or the sandbox image is "
                f"missing; {_DOCKER_FIX}, or set REVISE_SANDBOX=process")
        return _docker_runner(settings)
    if docker_ready(settings):
        return _docker_runner(settings)
    return _process_runner(settings, process, "no Docker engine or sandbox image")


def check_sandbox_worker(settings: Settings, *, process: ProcessSettings | None = None) -> str:
    """What a sandbox worker will run jobs in; SandboxUnavailable when it must not start."""
    process = process or ProcessSettings()
    if weak_named(settings, process):
        log.warning("!! %s", WeakProcessRunner.warnings[0])
        return "weak process mode (named explicitly)"
    if settings.sandbox == SandboxKind.PROCESS:
        runner = ProcessRunner(settings=process)
        runner.check()
        return "process sandbox (bubblewrap, named explicitly)"
    if docker_ready(settings):
        return "docker"
    if settings.sandbox == SandboxKind.DOCKER:
        raise SandboxUnavailable(f"REVISE_SANDBOX=docker but no Docker engine answers or the "
                                 f"sandbox image is missing; {_DOCKER_FIX}")
    raise SandboxUnavailable(
        "REVISE_SANDBOX=auto and no Docker engine answers (or the sandbox image is missing); "
        "a sandbox worker does not fall back to the weaker process sandbox on its own: "
        f"{_DOCKER_FIX}, or name the process sandbox with REVISE_SANDBOX=process")

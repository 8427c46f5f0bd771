"""Where a script runs: the Docker and bubblewrap runners and their policies, the host
side of the sandbox socket, the in-sandbox runtime, and the sandbox image."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from sandbox.channel import Channel
    from sandbox.docker_runner import DockerRunner
    from sandbox.image import ensure_image
    from sandbox.job import SandboxJob
    from sandbox.launch import Launched
    from sandbox.process_profile import ProcessSettings
    from sandbox.runner import ProcessRunner, Runner
    from sandbox.select import select_runner

__all__ = [
    "Channel",
    "DockerRunner",
    "Launched",
    "ProcessRunner",
    "ProcessSettings",
    "Runner",
    "SandboxJob",
    "ensure_image",
    "select_runner",
]
__getattr__ = lazy_exports(__name__, __file__)

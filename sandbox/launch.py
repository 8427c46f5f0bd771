"""A started sandbox, and the cold launch every runner shares.

``launch`` hands the host a ``Launched``: the job, the listening socket of its
fresh RPC directory, and the sandbox itself. A warm pool hands back the same
record for a sandbox it started earlier.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker.envelope import SandboxLimits
from sandbox.job import SandboxJob, open_rpc_dir, remove_rpc_dir


class Sandbox(Protocol):
    """One started sandbox."""

    def wait(self, timeout: float) -> int | None: ...
    def kill(self) -> None: ...
    def cleanup(self) -> None: ...  # idempotent; kills and releases everything
    def output(self) -> str: ...  # bounded tail of stdout+stderr


@dataclass
class Launched:
    job: SandboxJob  # its rpc_dir may be a warm sandbox's own directory
    listener: socket.socket  # the listening socket the host serves on
    sandbox: Sandbox


def launch_cold(start: Callable[[SandboxJob], Sandbox], run_id: str, rpc_dir: Path,
                limits: SandboxLimits) -> Launched:
    """Listen on a fresh RPC directory, then start a sandbox for it with ``start``."""
    listener = open_rpc_dir(rpc_dir)
    job = SandboxJob(run_id, rpc_dir, limits)
    try:
        sandbox = start(job)
    except BaseException:
        listener.close()
        remove_rpc_dir(rpc_dir)
        raise
    return Launched(job, listener, sandbox)

"""Two "hosts" on this machine: each role group in its own UTS namespace (its own
hostname, via ``unshare --uts``; the suite runs as root) with its own REVISE_HOME,
sharing only Redis, PostgreSQL and the object store (moto's S3 server).

Host A runs the dispatcher, the sandbox workers and the reconciler; host B the
broker (capability) workers. The test process and the ``revise`` commands it
runs are a third place with a third REVISE_HOME.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.providers import ProviderLog
from tests.conftest import _missing_service
from tests.workers.conftest import ROOT, Stack, make_stack

HOST_A, HOST_B = "revise-host-a", "revise-host-b"


@pytest.fixture(autouse=True)
def _can_make_hosts() -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None or subprocess.run(
            ["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        _missing_service("the two-host test needs root and unshare --uts")


def share_object_store(stack: Stack, s3_env: dict[str, str]) -> None:
    """Every process of the stack (and every `revise` command) keeps artifacts in S3."""
    stack.env.update(s3_env, REVISE_ARTIFACT_STORE="s3")


def revise(stack: Stack, home: Path, *argv: str, code: int = 0, timeout: float = 180
           ) -> Any:
    """A `revise` command from a third place: its own REVISE_HOME, the stack's settings."""
    home.mkdir(parents=True, exist_ok=True)
    env = {**stack.env, "REVISE_HOME": str(home)}
    done = subprocess.run([sys.executable, "-m", "workers.cli", *argv], cwd=home,
                          env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == code, done.stdout + done.stderr
    return json.loads(done.stdout)


def provider_log(home: Path) -> list[dict[str, Any]]:
    return ProviderLog(home / "provider-log.jsonl").read()


__all__ = ["HOST_A", "HOST_B", "ROOT", "make_stack", "provider_log", "revise",
           "share_object_store"]

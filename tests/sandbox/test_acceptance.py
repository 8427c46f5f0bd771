"""`python -m tests.acceptance` against the real image and the real bwrap: every check
must pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.acceptance.pipeline import PIPELINE_CHECKS
from tests.acceptance.probes import PROBES

ROOT = Path(__file__).resolve().parents[2]


def acceptance(*args: str) -> int:
    """The number of checks that passed; fails unless every one did."""
    done = subprocess.run([sys.executable, "-m", "tests.acceptance", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.endswith(" passed, 0 failed"), summary
    return int(summary.split()[0])


@pytest.mark.docker
def test_every_docker_acceptance_check_passes(sandbox_settings) -> None:
    assert acceptance() == len(PROBES) + 1  # + the removed-container check


def test_every_process_sandbox_acceptance_check_passes(process_python) -> None:
    assert acceptance("--runner", "process") == len(PROBES)


def test_every_process_sandbox_pipeline_check_passes(process_python) -> None:
    assert acceptance("--runner", "process", "--pipeline", "--only", "pipeline:") == len(
        PIPELINE_CHECKS)


def test_the_checks_cover_the_rpc_directory_and_socket() -> None:
    names = {probe.name for probe in PROBES}
    assert {"RPC directory read-only", "RPC socket connectable", "pids limit",
            "daemon dies with the sandbox", "no host processes"} <= names
    assert len(PROBES) >= 16


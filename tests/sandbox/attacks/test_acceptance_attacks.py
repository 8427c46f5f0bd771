"""`python -m sandbox.acceptance --attacks`: the corpus subset the acceptance run carries."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandbox.acceptance import ATTACK_CHECKS, PROBES


def _attacks(*args: str) -> int:
    done = subprocess.run([sys.executable, "-m", "sandbox.acceptance", "--attacks",
                           "--only", "attack:", *args], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert summary.endswith(" passed, 0 failed"), summary
    return int(summary.split()[0])


def test_every_process_sandbox_attack_check_passes(process_python) -> None:
    assert _attacks("--runner", "process") == len(ATTACK_CHECKS)


@pytest.mark.docker
def test_every_docker_attack_check_passes(sandbox_settings) -> None:
    assert _attacks("--runner", "docker") == len(ATTACK_CHECKS)


def test_the_attack_checks_are_separate_from_the_probes() -> None:
    assert not any("attack:" in probe.name for probe in PROBES)
    assert len(ATTACK_CHECKS) >= 12

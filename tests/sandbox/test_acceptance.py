"""`python -m sandbox.acceptance` against the real image: every check must pass."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.docker


def test_every_acceptance_check_passes(sandbox_settings) -> None:
    done = subprocess.run([sys.executable, "-m", "sandbox.acceptance"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    summary = done.stdout.strip().splitlines()[-1]
    passed = int(summary.split()[0])
    assert passed >= 16 and summary.endswith("0 failed")

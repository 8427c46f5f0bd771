"""``bench/crash_recovery.py`` runs one round end to end and prints every figure (it went
stale once: its sandbox round waited for a `lost` state the resume design no longer
writes, and its broker round killed the worker before it had taken the call)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.redis
@pytest.mark.postgres
def test_one_round_prints_every_figure(redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "crash_recovery.py"), "--rounds", "1",
         "--redis-url", redis_url],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in ("broker SIGKILL -> blocked", "broker SIGKILL -> sandbox job ended",
                   "broker SIGKILL -> reconciled by the operator",
                   "sandbox SIGKILL -> job resumed by the reconciler",
                   "sandbox SIGKILL -> run succeeded, each call paid once"):
        assert re.search(rf"^{re.escape(figure)}.*( +\d+\.\d){{3}}$", done.stdout,
                         re.MULTILINE), done.stdout
    assert re.search(r"blocked within two attempt leases \(60 s\): yes", done.stdout), \
        done.stdout

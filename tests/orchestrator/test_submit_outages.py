"""`revise submit` when services are away: a named error or exit 3, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.cli_common import EXIT_FAILED, EXIT_UNKNOWN

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "fixtures" / "scripts" / "crash_seq.py")


def _submit(tmp_path: Path, redis_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_REDIS_URL": redis_url,
           "REVISE_CELERY_QUEUE_PREFIX": f"t{uuid.uuid4().hex[:8]}-", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "orchestrator.cli", "submit", SCRIPT,
                           "--run-id", "r", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_redis_down_is_named_not_a_traceback(tmp_path: Path) -> None:
    done = _submit(tmp_path, "redis://127.0.0.1:1/0", "--json")
    assert done.returncode == EXIT_FAILED
    assert "Traceback" not in done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "QueueUnavailable" and "127.0.0.1:1" in error["message"]


@pytest.mark.redis
def test_a_wait_that_cannot_tell_yet_exits_3(tmp_path: Path, redis_url: str) -> None:
    done = _submit(tmp_path, redis_url, "--wait", "--timeout", "2")  # no worker runs
    assert done.returncode == EXIT_UNKNOWN
    assert "Traceback" not in done.stderr
    assert "still queued after 2 s" in done.stderr

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


_WAITER = """
import sys
from broker.settings import Settings
from workers.client import Client, JobHandle

client = Client(Settings(redis_url=sys.argv[1], database_url=sys.argv[2]))
handle = JobHandle(client, "job", "run")
handle._dispatched = {"accepted": True}  # the waits listen on the sandbox task's result
handle._nap(0.2)
handle._nap(0.2)
print("listened", flush=True)
sys.stdin.readline()  # Redis is killed now; the process then exits
"""


def test_a_wait_ending_while_redis_is_away_prints_no_traceback(tmp_path: Path) -> None:
    """A client whose Redis went away after it listened for a result exits quietly (it
    used to print Celery's 'Retry limit exceeded' traceback from a result's __del__)."""
    from tests.faults.services import PrivateRedis

    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", _WAITER, redis.url, f"sqlite:///{tmp_path / 'runs.db'}"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert child.stdout is not None and child.stdout.readline().strip() == "listened"
        redis.kill()
        _, stderr = child.communicate("go\n", timeout=120)
    finally:
        redis.close()
    assert child.returncode == 0, stderr
    assert "Traceback" not in stderr and "Retry limit" not in stderr, stderr

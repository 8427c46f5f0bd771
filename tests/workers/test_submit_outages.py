"""`revise submit` when services are away: a named error or exit 3, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from orchestrator.cli_common import EXIT_UNKNOWN

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "fixtures" / "scripts" / "crash_seq.py")


def _submit(tmp_path: Path, redis_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_REDIS_URL": redis_url,
           "REVISE_CELERY_QUEUE_PREFIX": f"t{uuid.uuid4().hex[:8]}-", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "workers.cli", "submit", SCRIPT,
                           "--run-id", "r", *argv], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120)


def test_redis_down_for_the_whole_timeout_is_named_and_exits_3(tmp_path: Path) -> None:
    """A client started during an outage waits it out within --timeout; past it, it
    cannot tell: exit 3 with the service named, never a traceback."""
    done = _submit(tmp_path, "redis://127.0.0.1:1/0", "--json", "--timeout", "3")
    assert done.returncode == EXIT_UNKNOWN
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["error"]["code"] == "queue_unavailable"
    assert "waiting" in done.stderr and "queueing the job" in done.stderr
    assert "127.0.0.1:1" in done.stderr


def test_a_submit_started_while_redis_is_down_queues_when_it_is_back(tmp_path: Path
                                                                      ) -> None:
    import time

    import redis as redis_client

    from tests.faults.services import PrivateRedis

    redis = PrivateRedis(tmp_path / "redis")
    try:
        env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"),
               "REVISE_REDIS_URL": redis.url, "REVISE_CELERY_QUEUE_PREFIX": "back-"}
        client = subprocess.Popen([sys.executable, "-m", "workers.cli", "submit", SCRIPT,
                                   "--run-id", "r", "--timeout", "60", "--json"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env=env, cwd=tmp_path)
        time.sleep(3)  # the client is up, and Redis is not
        assert client.poll() is None
        redis.start()
        out, errors = client.communicate(timeout=60)
        assert client.returncode == 0, errors
        assert json.loads(out)["status"] == "queued" and "Traceback" not in errors
        assert redis_client.Redis.from_url(redis.url).llen("back-dispatch") == 1
    finally:
        redis.close()


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


def test_a_wait_through_a_redis_outage_keeps_its_timeout_and_says_why(tmp_path: Path) -> None:
    """With Redis gone the wait goes on on the store alone: a progress line names Redis,
    and the timeout holds (a nap on the result backend used to block about 20 s in
    Celery's reconnect loop)."""
    import time

    from broker.settings import Settings
    from tests.faults.services import PrivateRedis
    from workers.client import Client, JobHandle

    redis = PrivateRedis(tmp_path / "redis")
    redis.start()
    client = Client(Settings(redis_url=redis.url, database_url=f"sqlite:///{tmp_path}/r.db"))
    try:
        client.store.ensure_run("run")
        revision = client.store.add_revision("run", "src", "digest")  # running, no worker
        handle = JobHandle(client, "job", "run")
        handle._dispatched = {"job_id": "job", "run_id": "run", "accepted": True,
                              "revision": revision, "report": None, "error": None}
        redis.kill()
        lines: list[str] = []
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="still running after 3 s"):
            handle.wait(timeout=3, progress=lines.append)
        assert time.monotonic() - started < 8
    finally:
        client.close()
        redis.close()
    assert lines and "still waiting (on the store alone)" in lines[0], lines
    assert f"127.0.0.1:{redis.port}" in lines[0] and "listening for the end" in lines[0]


@pytest.mark.redis
@pytest.mark.postgres
def test_a_job_nobody_serves_says_which_queue_has_no_worker(make_stack) -> None:
    """The operator's first hour: the stack is not started, or was started with another
    queue prefix. A wait that runs out names the queue no worker of this stack consumes,
    and stays quiet about the ones that have one."""
    from broker.envelope import Envelope

    stack = make_stack()
    script = "async def orchestrate(ctx, args):\n    return 1\n"
    queued = stack.client.submit(script, {}, Envelope(), "nobody")
    with pytest.raises(TimeoutError) as nobody:
        queued.wait(2)
    assert f"no worker consumes {stack.prefix}dispatch (none of" in str(nobody.value)
    assert "start the stack (`honcho start`)" in str(nobody.value)
    assert repr(stack.prefix) in str(nobody.value)
    stack.worker("dispatch", concurrency=1)
    stack.wait_ready(120)
    with pytest.raises(TimeoutError) as no_sandbox:
        queued.wait(5)
    assert "still running" in str(no_sandbox.value)
    assert (f"no worker consumes {stack.prefix}sandbox or {stack.prefix}capabilities"
            in str(no_sandbox.value))
    stack.worker("sandbox", concurrency=2)
    stack.worker("capabilities", concurrency=2)
    stack.wait_ready(120)
    assert queued.wait(120)["status"] == "succeeded"

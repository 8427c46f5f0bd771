"""Warm sandboxes: pre-started, one per job, never reused across runs, for both runners."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker.envelope import SandboxLimits
from sandbox.warm_pool import WARM_RUN, WarmPool

# A stand-in for the runtime: connect at once, wait for the job, answer, exit.
WARM_PROBE = """
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("/rpc/rpc.sock")
job = s.recv(100)
s.sendall(b"ran " + job)
"""


def _serve(launched, job: bytes) -> bytes:
    """Accept the sandbox's connection (already pending for a warm one) and hand it a job."""
    launched.listener.settimeout(60)
    conn, _ = launched.listener.accept()
    with conn:
        conn.sendall(job)
        conn.settimeout(60)
        return conn.recv(100)


def _finish(launched) -> None:
    launched.sandbox.cleanup()
    launched.listener.close()


def _wait_for(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_process_runner_hands_each_job_its_own_prestarted_sandbox(process_python, rpc_dirs):
    from sandbox.runner import ProcessRunner

    runner = ProcessRunner(command=(process_python, "-I", "-S", "-c", WARM_PROBE), warm=2)
    launched = []
    try:
        assert _wait_for(lambda: runner._pool.ready() == 2)  # type: ignore[union-attr]
        for i in range(3):
            asked = rpc_dirs()
            warm = runner.launch(f"run-{i}", asked, SandboxLimits())
            launched.append(warm)
            assert warm.job.run_id == f"run-{i}"
            assert _serve(warm, f"job {i}".encode()) == f"ran job {i}".encode()
            assert warm.sandbox.wait(30) == 0
            if i < 2:
                assert warm.job.rpc_dir != asked and not asked.exists()  # a warm one
        odd = runner.launch("odd", rpc_dirs(), SandboxLimits(memory_mb=256))
        launched.append(odd)
        assert odd.job.rpc_dir.name.startswith("rpc-")  # other limits: started cold
        assert _serve(odd, b"odd") == b"ran odd"
    finally:
        for item in launched:
            _finish(item)
        runner.close()
    dirs = [item.job.rpc_dir for item in launched]
    assert len(set(dirs)) == 4, "a sandbox is never reused across runs"
    assert len({id(item.sandbox) for item in launched}) == 4


def test_the_pool_replaces_a_warm_sandbox_that_died(process_python, tmp_path: Path):
    from sandbox.runner import ProcessRunner

    cold = ProcessRunner(command=(process_python, "-I", "-S", "-c", WARM_PROBE))
    counter = iter(range(100))
    pool = WarmPool(lambda run_id, _dir, limits: cold.launch(
        run_id, tmp_path / f"cold-{next(counter)}", limits), 1, check_interval=0.2)
    try:
        assert _wait_for(lambda: pool.ready() == 1)
        first = pool._ready[0]
        assert first.job.run_id == WARM_RUN
        first.sandbox.kill()  # dies while idle
        assert _wait_for(lambda: pool.ready() == 1 and pool._ready[0] is not first)
        assert not first.job.rpc_dir.exists(), "the dead one's directory is removed"
        second = pool._ready[0]
        second.sandbox.kill()
        claimed = pool.claim("run", SandboxLimits())  # a claim skips a dead one too
        assert claimed is None or claimed.sandbox is not second
        if claimed is not None:
            _finish(claimed)
        assert pool.claim("run", SandboxLimits(pids=64)) is None  # other limits: never warm
    finally:
        pool.close()
    assert pool.ready() == 0


@pytest.mark.docker
def test_docker_runner_hands_each_job_its_own_prestarted_container(sandbox_settings,
                                                                   docker_client, rpc_dirs):
    from sandbox.docker_runner import LABEL_OWNER, LABEL_RUN, DockerRunner, _owner

    runner = DockerRunner(sandbox_settings, client=docker_client, warm=1,
                          command=("python3", "-I", "-S", "-c", WARM_PROBE))
    launched = []
    try:
        assert _wait_for(lambda: runner._pool.ready() == 1, 120)  # type: ignore[union-attr]
        for i in range(2):
            warm = runner.launch(f"run-{i}", rpc_dirs(), SandboxLimits())
            launched.append(warm)
            assert _serve(warm, f"job {i}".encode()) == f"ran job {i}".encode()
            assert warm.sandbox.wait(60) == 0, warm.sandbox.output()
        assert launched[0].sandbox.container_id != launched[1].sandbox.container_id
    finally:
        for item in launched:
            _finish(item)
        runner.close()
    left = docker_client.containers.list(all=True, filters={"label": [
        f"{LABEL_RUN}={WARM_RUN}", f"{LABEL_OWNER}={_owner()}"]})
    assert left == [], "closing the pool removes its idle containers"

"""Choosing a runner fails closed; a sandbox worker never falls back on its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.errors import SandboxUnavailable
from broker.settings import SandboxKind, Settings
from sandbox.process_profile import ProcessSettings
from sandbox.runner import ProcessRunner, WeakProcessRunner
from sandbox.select import check_sandbox_worker, select_runner

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_docker(tmp_path) -> Settings:
    """Settings under which Docker is never ready: nothing is pinned."""
    return Settings(home=tmp_path / "home", sandbox_pin=tmp_path / "no-pin.json")


def test_process_means_bubblewrap_and_says_it_is_weaker(no_docker, process_python):
    runner = select_runner(no_docker.model_copy(update={"sandbox": SandboxKind.PROCESS}))
    assert isinstance(runner, ProcessRunner)
    assert runner.kind == "process" and "bubblewrap" in runner.isolation
    assert runner.warnings and "weaker than the Docker sandbox" in runner.warnings[0]


def test_auto_without_docker_is_bubblewrap_never_the_weak_child(no_docker, process_python):
    weak = ProcessSettings(isolation="weak")
    runner = select_runner(no_docker, process=weak)
    assert isinstance(runner, ProcessRunner)


def test_the_weak_child_only_when_named(no_docker):
    named = no_docker.model_copy(update={"sandbox": SandboxKind.PROCESS})
    runner = select_runner(named, process=ProcessSettings(isolation="weak"))
    assert isinstance(runner, WeakProcessRunner)
    assert runner.warnings and runner.warnings[0].startswith("UNSAFE")


def test_a_process_sandbox_that_cannot_be_set_up_fails_closed(no_docker, tmp_path):
    broken = ProcessSettings(bwrap=tmp_path / "missing-bwrap")
    for kind in (SandboxKind.PROCESS, SandboxKind.AUTO):
        with pytest.raises(SandboxUnavailable, match="process sandbox cannot be set up"):
            select_runner(no_docker.model_copy(update={"sandbox": kind}), process=broken)


def test_docker_named_without_an_engine_fails_closed(no_docker):
    with pytest.raises(SandboxUnavailable, match="REVISE_SANDBOX=docker"):
        select_runner(no_docker.model_copy(update={"sandbox": SandboxKind.DOCKER}))


def test_a_sandbox_worker_refuses_auto_without_docker(no_docker, process_python):
    with pytest.raises(SandboxUnavailable, match="REVISE_SANDBOX=process"):
        check_sandbox_worker(no_docker)
    named = no_docker.model_copy(update={"sandbox": SandboxKind.PROCESS})
    assert "bubblewrap" in check_sandbox_worker(named)
    assert "weak" in check_sandbox_worker(named, process=ProcessSettings(isolation="weak"))


def test_the_worker_start_hook_applies_to_the_sandbox_queue_only(no_docker):
    from workers.app import make_app, refuse_unsafe_sandbox

    app = make_app(no_docker)
    app.amqp.queues.select([app.routing.queue("dispatch")])
    refuse_unsafe_sandbox(sender=SimpleNamespace(app=app))  # not a sandbox worker: starts
    app.amqp.queues.select([app.routing.queue("sandbox")])
    with pytest.raises(SystemExit, match="refusing to start a sandbox worker"):
        refuse_unsafe_sandbox(sender=SimpleNamespace(app=app))


def test_a_celery_sandbox_worker_with_auto_and_no_docker_does_not_start(tmp_path):
    env = {**os.environ, "REVISE_SANDBOX": "auto", "REVISE_HOME": str(tmp_path / "home"),
           "REVISE_SANDBOX_PIN": str(tmp_path / "no-pin.json"),
           "PYTHONPATH": str(REPO)}
    env.pop("REVISE_CELERY_QUEUE_PREFIX", None)
    done = subprocess.run(
        [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q", "sandbox",
         "--pool", "solo", "-l", "WARNING"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "refusing to start a sandbox worker" in done.stdout + done.stderr
    assert "REVISE_SANDBOX=process" in done.stdout + done.stderr

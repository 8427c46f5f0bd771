"""Every role checks what it depends on when it starts (issue 29, item 1): a problem is
one line naming it and the fix, never a traceback. What may pass (the store, Redis) starts
the worker degraded; a setting it can never work with stops it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from broker.settings import Settings
from workers.preflight import refusals

from ..disks import full_disk
from .conftest import ROOT, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_worker_whose_store_does_not_answer_says_so_in_one_line(make_stack) -> None:
    stack = make_stack()
    stack.env["REVISE_DATABASE_URL"] = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    stack.env["REVISE_PROVIDER_BASE_URL"] = "https://api.openai.com/v1"  # provider: local
    stack.worker("capabilities", concurrency=1)
    stack.wait_ready(120)
    log = stack.tmp_path / "capabilities0.log"
    lines = wait_for(lambda: [line for line in log.read_text().splitlines()
                              if "preflight:" in line], 60, "the preflight lines")
    assert any("run store" in line and "127.0.0.1:1" in line for line in lines), lines
    assert any("REVISE_PROVIDER is local" in line for line in lines), lines
    assert all("starts degraded" in line for line in lines)
    assert len(lines) == 2 and "Traceback" not in log.read_text()


def test_an_unusable_artifact_store_degrades_a_role_that_may_not_need_it(make_stack) -> None:
    stack = make_stack()
    stack.worker("dispatch", concurrency=1, env={"REVISE_ARTIFACT_STORE": "s3"})
    stack.wait_ready(120)
    log = stack.tmp_path / "dispatch0.log"
    lines = wait_for(lambda: [line for line in log.read_text().splitlines()
                              if "preflight:" in line], 60, "the preflight line")
    assert len(lines) == 1 and "artifact store" in lines[0] and "REVISE_S3_BUCKET" in lines[0]


# ---- settings a role can never work with: it refuses to start -------------------------


_BROKER = {"capabilities"}


@pytest.mark.parametrize(("values", "says"), [
    ({"provider": "openai"}, "REVISE_PROVIDER=openai is not a provider; use local or http"),
    ({"provider": "http"}, "REVISE_PROVIDER=http needs REVISE_PROVIDER_BASE_URL"),
    ({"provider": "http", "provider_base_url": "https://api.openai.com/v1"},
     "REVISE_PROVIDER=http needs REVISE_PROVIDER_API_KEY"),
    ({"artifact_store": "s3"}, "REVISE_ARTIFACT_STORE=s3 needs a bucket"),
    ({"home": "/proc/revise"}, "REVISE_HOME=/proc/revise cannot be created"),
])
def test_what_the_settings_alone_show_never_works_is_a_refusal(values, says) -> None:
    found = refusals(Settings(**values), _BROKER)
    assert len(found) == 1 and found[0].startswith(says), found
    if "home" not in values:  # the provider and the artifacts are a broker worker's
        assert refusals(Settings(**values), {"dispatch", "sandbox", "reconcile"}) == []


def test_a_provider_with_its_key_or_a_gateways_header_is_no_refusal(tmp_path: Path) -> None:
    http = {"home": tmp_path, "provider": "http",
            "provider_base_url": "https://api.openai.com/v1"}
    assert refusals(Settings(**http, provider_api_key="sk-x"), _BROKER) == []
    gateway = Settings(**http, provider_headers='{"X-Gateway-Key": "g"}')
    assert refusals(gateway, _BROKER) == []
    assert refusals(Settings(home=tmp_path), _BROKER) == []  # local: nothing to refuse


def test_a_full_disk_under_home_is_no_refusal(tmp_path: Path) -> None:
    """A full disk passes, and meanwhile a paid result waits in memory: the broker worker
    starts (tests/faults: a full HOME during a store outage)."""
    with full_disk(tmp_path / "home") as home:
        assert refusals(Settings(home=home), _BROKER) == []
        assert refusals(Settings(home=home / "not-yet"), _BROKER) == []


def _start(role: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    """A worker of ``role`` as the Procfile starts it (its ``-Q`` unquoted, through a shell),
    against nothing that answers: a refusal comes before any connection."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("REVISE_")}
    command = (f"{sys.executable} -m celery -A workers.app worker "
               f"-Q ${{REVISE_CELERY_QUEUE_PREFIX}}{role} --pool threads -c 1 -l INFO "
               "--without-mingle --without-gossip")
    return subprocess.run(command, shell=True, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={
                              **clean, "PYTHONPATH": str(ROOT),
                              "REVISE_HOME": str(tmp_path / "home"),
                              "REVISE_DATABASE_URL": "postgresql+psycopg://x@127.0.0.1:1/x",
                              "REVISE_REDIS_URL": "redis://127.0.0.1:1/12",
                              "REVISE_CELERY_QUEUE_PREFIX": f"t{uuid.uuid4().hex[:8]}-",
                              **env})


@pytest.mark.parametrize(("role", "env", "says"), [
    ("capabilities", {"REVISE_PROVIDER": "openai"},
     "error: refusing to start a broker worker: REVISE_PROVIDER=openai is not a provider; "
     "use local or http"),
    ("capabilities", {"REVISE_PROVIDER": "http",
                      "REVISE_PROVIDER_BASE_URL": "https://api.openai.com/v1"},
     "error: refusing to start a broker worker: REVISE_PROVIDER=http needs "
     "REVISE_PROVIDER_API_KEY"),
    ("dispatch", {"REVISE_HOME": "/proc/revise"},
     "error: refusing to start a dispatcher worker: REVISE_HOME=/proc/revise cannot be "
     "created (making a directory in /proc failed: "),
    ("capabilities", {"REVISE_CELERY_QUEUE_PREFIX": "my stack-"},
     "error: REVISE_CELERY_QUEUE_PREFIX: 'my stack-' holds a character a queue name in the "
     "Procfile cannot; use only letters, digits, '.', '_', ':' and '-'"),
])
def test_a_setting_that_can_never_work_stops_the_worker_in_one_line(
        role: str, env: dict[str, str], says: str, tmp_path: Path) -> None:
    """It started degraded: every call raised ConfigError, the job saw its task lost twice
    and the run stopped with "check that broker workers are running", the cause unsaid."""
    done = _start(role, env, tmp_path)
    assert done.returncode != 0
    errors = [line for line in (done.stdout + done.stderr).splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith(says), done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_healthy_worker_says_it_is_ready(make_stack) -> None:
    stack = make_stack()
    stack.worker("dispatch", concurrency=1)
    stack.wait_ready(120)
    log = stack.tmp_path / "dispatch0.log"
    line = wait_for(lambda: [x for x in log.read_text().splitlines() if "preflight:" in x],
                    60, "the preflight line")
    assert "the run store and Redis answer" in line[0]
    assert "Context impl" not in log.read_text()  # alembic's INFO chatter stays out


@pytest.mark.parametrize(("variable", "role"), [
    ("REVISE_CELERY_PARK_AFTER_SECONDS", "dispatch"),
    ("REVISE_PROCESS_NPROC_CEILING", "sandbox"),
])
def test_a_refused_setting_stops_a_worker_in_one_line(make_stack, variable, role) -> None:
    """Each layer's settings (the queue's, the process sandbox's) name the variable."""
    stack = make_stack()
    proc = stack.worker(role, concurrency=1, env={variable: "abc",
                                                   "REVISE_SANDBOX": "process"})
    assert proc.wait(60) != 0
    log = (stack.tmp_path / f"{role}0.log").read_text()
    assert f"{variable}: Input should be a valid" in log
    assert "Traceback" not in log and "ValidationError" not in log


# Loaded by the worker's interpreter at start (sitecustomize): a thread that dies once
# the worker runs, its stderr then being its log.
DOOMED = '''
import sys, threading, time


def _die():
    deadline = time.monotonic() + 120
    while type(sys.stderr).__name__ != "LoggingProxy" and time.monotonic() < deadline:
        time.sleep(0.1)
    raise RuntimeError("boom in a background thread")


threading.Thread(target=_die, name="doomed", daemon=True).start()
'''


def test_a_thread_that_dies_says_so_in_one_record(make_stack) -> None:
    """No thread dies silently, and its traceback is not spread over one log line per
    write of Python's default hook."""
    stack = make_stack()
    site = stack.tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DOOMED)
    proc = stack.worker("dispatch", concurrency=1, env={
        "PYTHONPATH": f"{stack.env['PYTHONPATH']}:{site}"})
    stack.wait_ready(120)
    log = stack.tmp_path / "dispatch0.log"
    wait_for(lambda: "boom in a background thread" in log.read_text(), 60, "the thread death")
    time.sleep(1)  # a split traceback would still be arriving
    records = [line for line in log.read_text().splitlines() if line.startswith("[20")]
    about = [r for r in records if "boom" in r or "Traceback" in r or "doomed" in r]
    assert len(about) == 1, about  # its traceback follows inside the same record
    assert "ERROR" in about[0] and "thread doomed died: RuntimeError: boom" in about[0]
    assert proc.poll() is None, "the worker carries on"

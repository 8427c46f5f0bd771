"""Every role checks what it depends on when it starts (issue 29, item 1): a problem is
one line naming it and the fix, never a traceback, and the worker starts degraded."""

from __future__ import annotations

import time

import pytest

from .conftest import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_worker_whose_store_does_not_answer_says_so_in_one_line(make_stack) -> None:
    stack = make_stack()
    stack.env["REVISE_DATABASE_URL"] = "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    stack.env["REVISE_PROVIDER"] = "http"
    stack.env["REVISE_ARTIFACT_STORE"] = "s3"
    stack.worker("capabilities", concurrency=1)
    stack.wait_ready(120)
    log = stack.tmp_path / "capabilities0.log"
    lines = wait_for(lambda: [line for line in log.read_text().splitlines()
                              if "preflight:" in line], 60, "the preflight lines")
    assert any("run store" in line and "127.0.0.1:1" in line for line in lines), lines
    assert any("REVISE_PROVIDER_BASE_URL" in line for line in lines), lines
    assert any("artifact store" in line and "REVISE_S3_BUCKET" in line for line in lines)
    assert len(lines) == 3 and "Traceback" not in log.read_text()


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

"""`revise submit` as an operator meets it: one JSON object on every error under --json,
the exit codes its help names, a quick answer when it only queues, one typo warning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli_common import EXIT_UNKNOWN, EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "fixtures" / "scripts" / "crash_seq.py")
NO_REDIS = "redis://127.0.0.1:1/0"  # nothing listens there: nothing can be queued


def _revise(tmp_path: Path, *argv: str, timeout: float = 120,
            **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("REVISE_")}
    return subprocess.run(
        [sys.executable, "-m", "workers.cli", *argv], capture_output=True, text=True,
        cwd=tmp_path, timeout=timeout,
        env={**clean, "REVISE_HOME": str(tmp_path / "home"), "COLUMNS": "300",
             "REVISE_CELERY_QUEUE_PREFIX": f"t{uuid.uuid4().hex[:8]}-", **env})


def _json_error(done: subprocess.CompletedProcess[str]) -> dict:
    """The one JSON object on stdout, an error of the README's shape."""
    assert "Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stdout)["error"]  # one object: json.loads refuses a second
    assert {"type", "code", "message", "identity"} <= set(error), error
    return error


@pytest.mark.redis
def test_a_wait_that_times_out_is_one_json_error_with_a_hint_that_exists(
        tmp_path: Path, redis_url: str) -> None:
    done = _revise(tmp_path, "submit", SCRIPT, "--run-id", "r", "--wait", "--timeout", "2",
                   "--json", REVISE_REDIS_URL=redis_url)  # no worker runs
    assert done.returncode == EXIT_UNKNOWN, done.stderr
    error = _json_error(done)
    assert error["type"] == "QueueError" and error["code"] == "queue_error"
    assert error["job_id"] and "still queued after 2 s" in error["message"]
    # No command waits on a job again: the hint names what there is.
    assert "wait again" not in done.stderr + done.stdout
    assert "`revise show r` follows its run" in error["message"]
    assert error["message"] in done.stderr


def test_without_wait_a_redis_outage_is_a_quick_json_queue_unavailable(tmp_path: Path
                                                                       ) -> None:
    """Only queueing, and the default --timeout (the wait's 900 s): it answers in seconds,
    with the message the --wait path gives, as the one JSON object and exit 3."""
    started = time.monotonic()
    done = _revise(tmp_path, "submit", SCRIPT, "--run-id", "r", "--json", timeout=60,
                   REVISE_REDIS_URL=NO_REDIS)
    assert time.monotonic() - started < 30
    assert done.returncode == EXIT_UNKNOWN, done.stderr
    error = _json_error(done)
    assert error["type"] == "QueueUnavailable" and error["code"] == "queue_unavailable"
    assert error["port"] == 1 and "while queueing the job" in error["message"]
    assert f"timeout: queueing the job: {error['message']}" in done.stderr


@pytest.mark.parametrize("variable", [("REVISE_SANDBOX", "bogus"),
                                      ("REVISE_CELERY_LEASE_SECONDS", "soon")])
def test_a_refused_setting_is_the_settings_error_every_command_gives(
        tmp_path: Path, variable: tuple[str, str]) -> None:
    name, value = variable
    runs = _revise(tmp_path, "runs", "--json", REVISE_REDIS_URL=NO_REDIS, **{name: value})
    submit = _revise(tmp_path, "submit", SCRIPT, "--run-id", "r", "--json",
                     REVISE_REDIS_URL=NO_REDIS, **{name: value})
    assert submit.returncode == EXIT_USAGE, submit.stderr
    error = _json_error(submit)
    assert error["type"] == "SettingsError" and name in error["message"]
    if name == "REVISE_SANDBOX":  # `revise runs` reads no queue setting
        assert runs.returncode == EXIT_USAGE and _json_error(runs) == error


def test_repair_through_the_queue_refuses_a_queue_setting_as_a_command_does(tmp_path: Path
                                                                            ) -> None:
    (tmp_path / "answers.jsonl").write_text("")
    done = _revise(tmp_path, "repair", "--run-id", "r", "--model", "recorded:answers.jsonl",
                   "--json", REVISE_REPAIR_VIA="queue", REVISE_CELERY_LEASE_SECONDS="soon",
                   REVISE_REDIS_URL=NO_REDIS)
    assert done.returncode == EXIT_USAGE, done.stderr
    error = _json_error(done)
    assert error["type"] == "SettingsError"
    assert error["message"].startswith("REVISE_CELERY_LEASE_SECONDS: ")


@pytest.mark.parametrize("timeout", ["-1", "nan", "-inf"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused(tmp_path: Path,
                                                           timeout: str) -> None:
    done = _revise(tmp_path, "submit", SCRIPT, "--run-id", "r", "--wait", "--timeout",
                   timeout, "--json", REVISE_REDIS_URL=NO_REDIS)
    assert done.returncode == EXIT_USAGE, done.stderr
    error = _json_error(done)
    assert error["type"] == "InputError" and error["field"] == "--timeout"
    assert "give a number of seconds, 0 or more" in error["message"]


@pytest.mark.parametrize("argv", [["--json"], ["--wait"]])
def test_a_misspelt_variable_is_warned_about_once(tmp_path: Path, argv: list[str]) -> None:
    """Said when the command starts, and not again when the queue's app is loaded."""
    done = _revise(tmp_path, "submit", SCRIPT, "--run-id", "r", *argv, "--timeout", "1",
                   REVISE_REDIS_URL=NO_REDIS, REVISE_DATABSE_URL="x")
    warnings = [line for line in done.stderr.splitlines() if "REVISE_DATABSE_URL" in line]
    assert len(warnings) == 1, done.stderr
    assert "did you mean REVISE_DATABASE_URL?" in warnings[0]


def test_submit_help_names_every_exit_code() -> None:
    from workers.cli import app

    done = CliRunner().invoke(app, ["submit", "--help"], env={"COLUMNS": "400"})
    assert done.exit_code == 0
    text = " ".join(done.stdout.split())
    for said in ("Exit codes: 0 queued (with --wait: the run succeeded)",
                 "1 the run failed or stopped", "2 bad input or configuration",
                 "3 could not tell yet: --timeout passed"):
        assert said in text, text

"""Run ids on the command line: every command refuses a name that is not one safe path
component with a clear message and exit code 2, and creates nothing anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from broker.names import NAME_PATTERN
from orchestrator.cli_common import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "tests" / "fixtures" / "scripts" / "e3_v2.py")
REDIS_DB = os.environ.get("REVISE_TEST_REDIS_DB", "15")

BAD_RUN_IDS = {
    "parent escape": "../../x",
    "nested": "a/b",
    "empty": "",
    "dot": ".",
    "dot dot": "..",
    "200 chars": "x" * 200,
}


def _tree(base: Path) -> set[Path]:
    return set(base.rglob("*"))


@pytest.fixture
def sandbox_dirs(tmp_path: Path) -> dict[str, Path]:
    """A home two levels down, so '../../x' from its runs dir lands inside tmp_path."""
    home = tmp_path / "deep" / "home"
    cwd = tmp_path / "deep" / "cwd"
    cwd.mkdir(parents=True)
    return {"base": tmp_path, "home": home, "cwd": cwd}


@pytest.fixture
def revise(sandbox_dirs: dict[str, Path]):
    env = {**os.environ, "REVISE_HOME": str(sandbox_dirs["home"]), "REVISE_SANDBOX": "process",
           "REVISE_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}",
           "REVISE_CELERY_QUEUE_PREFIX": f"names-{uuid.uuid4().hex[:8]}-"}

    def call(*argv: str) -> tuple[int, Any, str]:
        done = subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                              capture_output=True, text=True, env=env,
                              cwd=sandbox_dirs["cwd"], timeout=120)
        assert "Traceback" not in done.stderr + done.stdout, done.stderr
        try:
            data = json.loads(done.stdout)
        except ValueError:
            data = done.stdout
        return done.returncode, data, done.stderr

    return call


def _assert_refused(code: int, data: Any, run_id: str) -> None:
    assert code == EXIT_USAGE, data
    assert data["error"]["type"] == "InputError"
    message = data["error"]["message"]
    assert message.startswith("run id ") and "is not allowed" in message
    assert NAME_PATTERN in message and "for example" in message
    assert repr(run_id[:40]) in message


def _assert_nothing_created(sandbox_dirs: dict[str, Path], before: set[Path]) -> None:
    home = sandbox_dirs["home"]
    new = _tree(sandbox_dirs["base"]) - before
    outside = [p for p in new if not p.is_relative_to(home)]
    assert outside == [], f"created outside REVISE_HOME: {outside}"
    assert not (home / "runs").exists() or list((home / "runs").iterdir()) == []


@pytest.mark.parametrize("command", ["run", "submit"])
@pytest.mark.parametrize("run_id", list(BAD_RUN_IDS.values()), ids=list(BAD_RUN_IDS))
def test_run_and_submit_refuse_bad_run_ids(revise, sandbox_dirs, command: str,
                                           run_id: str) -> None:
    before = _tree(sandbox_dirs["base"])
    code, data, _ = revise(command, SCRIPT, "--run-id", run_id, "--json")
    _assert_refused(code, data, run_id)
    _assert_nothing_created(sandbox_dirs, before)


@pytest.mark.parametrize("argv", [
    ["gate", SCRIPT, "--run-id", "{}"],
    ["show", "{}"],
    ["certificate", "{}"],
    ["orphans", "{}"],
    ["attempts", "--run-id", "{}"],
    ["reconcile", "{}", "orchestrate/#0@:0", "--abandon"],
    ["repair", "--run-id", "{}", "--model", "recorded:/nonexistent.jsonl"],
], ids=lambda argv: argv[0])
@pytest.mark.parametrize("run_id", ["../../x", ".."])
def test_every_command_taking_a_run_id_refuses_bad_ones(revise, sandbox_dirs,
                                                         argv: list[str], run_id: str) -> None:
    before = _tree(sandbox_dirs["base"])
    code, data, _ = revise(*[run_id if part == "{}" else part for part in argv], "--json")
    _assert_refused(code, data, run_id)
    _assert_nothing_created(sandbox_dirs, before)


def test_the_human_message_is_one_clear_line_without_a_trace(revise, sandbox_dirs) -> None:
    code, out, err = revise("run", SCRIPT, "--run-id", "../../x")
    assert code == EXIT_USAGE and out == ""
    text = " ".join(err.split())  # rich wraps long lines
    assert text.startswith("error: run id '../../x' is not allowed: it contains a path "
                           "separator")
    assert NAME_PATTERN in text  # markup-escaped, printed literally


def test_a_valid_run_id_still_runs(revise, sandbox_dirs) -> None:
    code, data, _ = revise("run", SCRIPT, "--run-id", "shots-2024.1", "--json")
    assert code == 0, data
    assert data["run_id"] == "shots-2024.1" and data["status"] == "succeeded"
    _, shown, _ = revise("show", "shots-2024.1", "--json")
    assert shown["run"]["run_id"] == "shots-2024.1"


def test_a_nul_byte_in_a_run_id_is_refused(sandbox_dirs, monkeypatch) -> None:
    # A process cannot receive a NUL in argv (execve refuses it), so this one runs the
    # same typer app in-process, the way a wrapper that builds argv itself would.
    from workers.cli import app

    monkeypatch.setenv("REVISE_HOME", str(sandbox_dirs["home"]))
    monkeypatch.chdir(sandbox_dirs["cwd"])
    before = _tree(sandbox_dirs["base"])
    for argv in (["run", SCRIPT, "--run-id", "a\x00b", "--json"], ["show", "r\x00", "--json"]):
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == EXIT_USAGE, result.output
        assert isinstance(result.exception, SystemExit)
        message = json.loads(result.stdout)["error"]["message"]
        assert "\\x00" in message and "\x00" not in message
    _assert_nothing_created(sandbox_dirs, before)

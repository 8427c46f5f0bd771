"""The host's commands on an operator's mistakes: a named error (one JSON object under
--json) and the exit code of its kind, never a traceback, never a quiet success."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from broker.artifact_stores import open_artifact_store
from broker.settings import Settings
from broker.sqlstore import SqlStore
from orchestrator.cli import app
from orchestrator.cli_common import EXIT_FAILED, EXIT_USAGE


def _revise(home: Path, *argv: str, **env: str) -> tuple[int, Any, str]:
    """Exit code, stdout (its JSON when it is JSON) and stderr of one command."""
    done = CliRunner().invoke(app, list(argv), env={"REVISE_HOME": str(home),
                                                    "COLUMNS": "300", **env})
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    try:
        stdout = json.loads(done.stdout)
    except ValueError:
        stdout = done.stdout
    return done.exit_code, stdout, done.stderr


def _a_run(home: Path, run_id: str) -> None:
    store = SqlStore.open(Settings(home=home).resolved_database_url)
    try:
        store.ensure_run(run_id)
        store.add_revision(run_id, "async def orchestrate(ctx, args):\n    return 1\n", "d")
    finally:
        store.close()


def test_a_report_page_that_cannot_be_written_names_the_path_and_why(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _a_run(home, "r")
    page = tmp_path / "missing" / "r.html"
    code, _, stderr = _revise(home, "report", "r", "--html", str(page))
    assert code == EXIT_USAGE
    assert stderr.strip() == (f"error: cannot write the report to {page}: No such file or "
                              "directory; pass a writable --html FILE")
    code, data, _ = _revise(home, "report", "r", "--html", str(tmp_path), "--json")
    assert code == EXIT_USAGE and data["error"]["type"] == "InputError"
    assert data["error"]["file"] == str(tmp_path) and "Is a directory" in data["error"]["message"]


def test_a_home_that_cannot_be_created_is_a_config_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    home = blocker / "home"
    code, data, _ = _revise(home, "runs", "--json")
    assert code == EXIT_USAGE
    error = data["error"]
    assert error["type"] == "ConfigError" and error["setting"] == "REVISE_HOME"
    assert error["message"].startswith(f"REVISE_HOME={home} cannot be created ({blocker} "
                                       "is not a directory); set REVISE_HOME to a directory")
    code, _, stderr = _revise(home, "runs")
    assert code == EXIT_USAGE and stderr.startswith(f"error: REVISE_HOME={home} cannot be")


@pytest.mark.postgres
def test_a_home_under_proc_with_a_postgresql_store(tmp_path: Path, postgres_url: str) -> None:
    code, data, _ = _revise(Path("/proc/revise"), "runs", "--json",
                            REVISE_DATABASE_URL=postgres_url)
    assert code == EXIT_USAGE
    assert data["error"]["message"].startswith(
        "REVISE_HOME=/proc/revise cannot be created (making a directory in /proc failed")


@pytest.mark.parametrize("argv", [["orphans", "nope"], ["attempts", "--run-id", "nope"]])
def test_a_run_that_does_not_exist_is_answered_as_show_answers(tmp_path: Path,
                                                               argv: list[str]) -> None:
    home = tmp_path / "home"
    _a_run(home, "r")
    shown = _revise(home, "show", "nope", "--json")
    assert shown[0] == EXIT_FAILED and shown[1]["error"]["code"] == "run_not_found"
    assert _revise(home, *argv, "--json")[:2] == shown[:2]
    code, _, stderr = _revise(home, *argv)
    assert code == EXIT_FAILED
    assert " ".join(stderr.split()).startswith(
        "error: no run 'nope' in this run store; `revise runs` lists the known runs (a run "
        "submitted to a deployment appears once a dispatcher takes its job)")


def test_attempts_of_a_run_in_a_store_nothing_ran_in(tmp_path: Path) -> None:
    code, data, _ = _revise(tmp_path / "home", "attempts", "--run-id", "nope", "--json")
    assert code == EXIT_FAILED and data["error"]["code"] == "run_not_found"
    assert _revise(tmp_path / "home", "attempts", "--json")[:2] == (0, {"attempts": []})


def test_a_negative_limit_is_bad_input(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _a_run(home, "r")
    code, data, _ = _revise(home, "runs", "--limit", "-1", "--json")
    assert code == EXIT_USAGE
    assert data["error"]["type"] == "InputError" and data["error"]["field"] == "--limit"
    assert data["error"]["message"] == "--limit -1: give the most runs to list, 0 or more"
    assert _revise(home, "runs", "--limit", "1", "--json")[1]["runs"][0]["run_id"] == "r"


def test_an_artifact_fetched_onto_a_directory_names_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    ref = open_artifact_store(Settings(home=home)).put(b"\x89PNG bytes", "image/png")
    target = tmp_path / "pictures"
    target.mkdir()
    code, data, _ = _revise(home, "artifact", "get", ref.id, "-o", str(target), "--json")
    assert code == EXIT_USAGE and data["error"]["file"] == str(target)
    assert data["error"]["message"] == (f"cannot write {target}: Is a directory; pass a "
                                        "writable -o FILE")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []

"""Settings as an operator meets them: URL spellings, misspelt variables, `revise config`."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker.errors import ConfigError
from broker.settings import (
    Settings,
    known_variables,
    mask_url,
    normalize_database_url,
    unknown_variables,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("given", "expected"), [
    ("postgres://u:pw@db:5432/revise", "postgresql+psycopg://u:pw@db:5432/revise"),
    ("postgresql://u@db/revise", "postgresql+psycopg://u@db/revise"),
    ("postgresql+psycopg://u@db/revise", "postgresql+psycopg://u@db/revise"),
    ("postgresql+psycopg2://u@db/revise", "postgresql+psycopg2://u@db/revise"),
    ("sqlite:////var/lib/revise/revise.db", "sqlite:////var/lib/revise/revise.db"),
    ("sqlite+pysqlite:///x.db", "sqlite+pysqlite:///x.db"),
])
def test_database_url_spellings(given: str, expected: str) -> None:
    assert normalize_database_url(given) == expected
    settings = Settings(database_url=given)
    assert settings.resolved_database_url == expected
    assert settings.run_store_is_shared == expected.startswith("postgresql")


@pytest.mark.parametrize(("given", "says"), [
    ("mysql://u@db/revise", "unknown scheme mysql://"),
    ("db.example.com/revise", "not a database URL"),
    ("postgres://u@db:port/revise", "cannot be parsed"),
])
def test_a_bad_database_url_names_the_variable_and_the_accepted_forms(given: str,
                                                                      says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(database_url=given)
    message = caught.value.message
    assert message.startswith("REVISE_DATABASE_URL: ") and says in message
    assert "postgres:// and postgresql://" in message and "sqlite:///" in message


def test_a_bad_value_is_a_config_error_not_a_validation_traceback() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(sandbox="dockr", sandbox_warm=-1)
    assert caught.value.problems[0].startswith("REVISE_SANDBOX: ")
    assert caught.value.problems[1].startswith("REVISE_SANDBOX_WARM: ")


def test_passwords_inside_urls_are_masked() -> None:
    assert mask_url("postgresql+psycopg://u:s3cret@db/r") == "postgresql+psycopg://u:***@db/r"
    assert mask_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert mask_url("redis://redis:6379/0") == "redis://redis:6379/0"


def test_unknown_variables_get_the_nearest_name_across_every_settings_class() -> None:
    found = {u.name: u.nearest for u in unknown_variables({
        "REVISE_DATABSE_URL": "", "revise_celery_queue_prefx": "", "REVISE_PROCES_UID": "",
        "REVISE_ZZZZZZ": "", "REVISE_HOME": "", "REVISE_CELERY_WAVE_CHUNK": "",
        "REVISE_PROCESS_BWRAP": "", "PATH": ""})}
    assert found == {"REVISE_DATABSE_URL": "REVISE_DATABASE_URL",
                     "REVISE_CELERY_QUEUE_PREFX": "REVISE_CELERY_QUEUE_PREFIX",
                     "REVISE_PROCES_UID": "REVISE_PROCESS_UID", "REVISE_ZZZZZZ": None}


def test_every_revise_variable_the_repository_uses_is_known() -> None:
    """compose.yaml, the Procfile, shell scripts, tests and benchmarks read REVISE_* names
    outside the settings classes: none of them may be reported as a misspelling."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    used: set[str] = set()
    for name in files:
        path = ROOT / name
        if path.suffix in {".py", ".sh", ".yaml", ".yml", ".md", ""} and path.is_file() \
                and path != Path(__file__).resolve():  # this file misspells on purpose
            used |= set(re.findall(r"\bREVISE_[A-Z0-9_]*[A-Z0-9]\b",
                                   path.read_text(encoding="utf-8", errors="replace")))
    prefixes = {"REVISE_CELERY", "REVISE_MODEL", "REVISE_PROCESS", "REVISE_S3"}  # "REVISE_S3_*"
    assert sorted(used - prefixes - known_variables()) == []


def _revise(*argv: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("REVISE_")}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**clean, "REVISE_HOME": str(tmp_path / "home"),
                               "COLUMNS": "200", **env})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_misspelt_variable_is_a_warning_line_for_every_command(tmp_path: Path) -> None:
    done = _revise("runs", env={"REVISE_DATABSE_URL": "sqlite:///x.db"}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "REVISE_DATABSE_URL" in line]
    assert lines == ["WARNING revise.settings: REVISE_DATABSE_URL is not a Revise setting "
                     "and is ignored; did you mean REVISE_DATABASE_URL?"]


def test_a_bad_database_url_is_one_error_line_in_a_command(tmp_path: Path) -> None:
    done = _revise("runs", env={"REVISE_DATABASE_URL": "mysql://u:pw@db/r"},
                   tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: REVISE_DATABASE_URL: unknown scheme mysql://; use postgresql+psycopg://"
        "USER:PASSWORD@HOST:5432/DB (postgres:// and postgresql:// mean the same), or "
        "sqlite:///PATH"]


def test_revise_config_shows_every_setting_masked_with_its_source(tmp_path: Path) -> None:
    done = _revise("config", "--json", tmp_path=tmp_path, env={
        "REVISE_DATABASE_URL": "postgres://revise:s3cret@127.0.0.1:1/nowhere",
        "REVISE_MODEL_API_KEY": "sk-s3cret", "REVISE_CELERY_QUEUE_PREFIX": "a-",
        "REVISE_PROCESS_ISOLATION": "weak"})
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    data = json.loads(done.stdout)
    rows = {row["variable"]: row for row in data["settings"]}
    assert rows["REVISE_DATABASE_URL"] == {
        "variable": "REVISE_DATABASE_URL", "source": "env",
        "value": "postgresql+psycopg://revise:***@127.0.0.1:1/nowhere"}
    assert rows["REVISE_MODEL_API_KEY"]["value"] == "***"
    assert rows["REVISE_CELERY_QUEUE_PREFIX"] == {
        "variable": "REVISE_CELERY_QUEUE_PREFIX", "value": "a-", "source": "env"}
    assert rows["REVISE_PROCESS_ISOLATION"]["value"] == "weak"
    assert rows["REVISE_LEDGER_POLICY"] == {
        "variable": "REVISE_LEDGER_POLICY", "value": "auto", "source": "default"}
    assert set(rows) >= {f"REVISE_{f.upper()}" for f in Settings.model_fields}
    assert data["problems"] == []
    human = _revise("config", tmp_path=tmp_path, env={"REVISE_SANDBOX": "process"})
    assert re.search(r"REVISE_SANDBOX\s.*process\s.*env", human.stdout), human.stdout


def test_revise_config_check_is_one_line_per_problem(tmp_path: Path) -> None:
    ok = _revise("config", "--check", env={}, tmp_path=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
    done = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_DATABASE_URL": "postgres://u:s3cret@db:port/r", "REVISE_CELERY_LEASE_SECONDZ": "9",
        "REVISE_CELERY_WAVE_CHUNK": "0"})
    assert done.returncode == 2
    assert "s3cret" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith("error: ") for line in lines)
    assert lines[0].startswith("error: REVISE_DATABASE_URL: cannot be parsed")
    assert lines[1].startswith("error: REVISE_CELERY_WAVE_CHUNK: ")
    assert lines[2] == ("error: REVISE_CELERY_LEASE_SECONDZ is not a Revise setting and is "
                        "ignored; did you mean REVISE_CELERY_LEASE_SECONDS?")
    as_json = _revise("config", "--check", "--json", tmp_path=tmp_path,
                      env={"REVISE_SANBOX": "process"})
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {"ok": False, "problems": [
        "REVISE_SANBOX is not a Revise setting and is ignored; did you mean REVISE_SANDBOX?"]}


@pytest.mark.postgres
def test_the_postgres_spelling_reaches_a_real_database(tmp_path: Path, postgres_url: str) -> None:
    """The form `pg_ctl`, Heroku and most tools print, through the commands that use it."""
    plain = postgres_url.replace("postgresql+psycopg://", "postgres://", 1)
    upgraded = _revise("db", "upgrade", "--json", tmp_path=tmp_path,
                       env={"REVISE_DATABASE_URL": plain})
    assert upgraded.returncode == 0, upgraded.stderr
    done = _revise("runs", "--json", tmp_path=tmp_path, env={"REVISE_DATABASE_URL": plain})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"runs": []}

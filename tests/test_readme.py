"""The README is the operator's manual: its settings table is complete, and its deployment
commands, extracted from the README (between the ``deployment`` markers), run as written
against a fresh database: create it, start the stack, submit, repair, watch, report."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from broker.settings import Settings, env_names
from sandbox.process_profile import ProcessSettings
from sandbox.runner import kill_processes_mentioning
from tests.conftest import REDIS_URL, _missing_service, _pg_admin_url
from workers.config import FlowerSettings, WorkerSettings

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# Deployment-level settings read by compose.yaml, not by pydantic.
DEPLOYMENT_ONLY = {"REVISE_DOCKER_GID", "REVISE_DB_PASSWORD", "REVISE_HOST_HOME"}
# The settings an operator sets.
SETTINGS_CLASSES = (Settings, WorkerSettings, FlowerSettings, ProcessSettings)


def _fields() -> dict[str, Any]:
    return {name: field for cls in SETTINGS_CLASSES
            for name, field in zip(env_names(cls), cls.model_fields.values(), strict=True)}


def _table_rows() -> set[str]:
    section = README[README.index("## Settings"):]
    section = section[:section.index("\n## ", 1)]
    return set(re.findall(r"^\| `(REVISE_[A-Z0-9_]+)` \|", section, flags=re.M))


def test_every_setting_has_one_row_in_the_readme_table() -> None:
    settings = set(_fields())
    rows = _table_rows()
    assert settings - rows == set(), "settings missing from the README table"
    assert rows - settings - DEPLOYMENT_ONLY == set(), "rows that are no setting"
    for name in DEPLOYMENT_ONLY:
        assert name in (ROOT / "Procfile").read_text() + (ROOT / "compose.yaml").read_text()


def test_a_numeric_default_in_the_table_is_the_real_one() -> None:
    fields = _fields()
    rows = re.findall(r"^\| `(REVISE_[A-Z0-9_]+)` \| `(-?[0-9.]+)` \|", README, flags=re.M)
    assert len(rows) >= 20
    wrong = {name: (shown, fields[name].default) for name, shown in rows
             if name in fields and isinstance(fields[name].default, int | float)
             and float(shown) != float(fields[name].default)}
    assert wrong == {}, "README defaults that are not the settings' defaults"


def test_every_revise_name_in_the_readme_is_a_setting() -> None:
    mentioned = set(re.findall(r"REVISE_[A-Z0-9_]*[A-Z0-9]\b", README))
    assert mentioned - set(_fields()) - DEPLOYMENT_ONLY == set()


def deployment_commands() -> str:
    begin, end = "<!-- deployment:begin -->", "<!-- deployment:end -->"
    block = README[README.index(begin) + len(begin):README.index(end)]
    match = re.search(r"```sh\n(.*?)```", block, flags=re.S)
    assert match, "the deployment block is a ```sh fence between the markers"
    return match.group(1)


README_DATABASE = "postgresql+psycopg://postgres@127.0.0.1:5432/revise"
README_REDIS = "redis://127.0.0.1:6379/0"


@pytest.fixture
def fresh_database() -> Iterator[str]:
    admin_url = _pg_admin_url()
    if admin_url is None:
        _missing_service("PostgreSQL is not reachable")
    assert admin_url is not None
    name = f"revise_readme_{uuid.uuid4().hex[:12]}"
    yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _exists(admin_url: str, name: str) -> bool:
    engine = create_engine(admin_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                {"n": name}).first() is not None
    finally:
        engine.dispose()


@pytest.mark.redis
@pytest.mark.postgres
def test_the_readme_deployment_runs_as_written(fresh_database: str, tmp_path: Path) -> None:
    from sandbox.select import docker_ready

    commands = deployment_commands()
    assert README_DATABASE in commands and README_REDIS in commands
    # Only the two service URLs change: a database no one created, the test Redis db.
    script = commands.replace(README_DATABASE, fresh_database).replace(README_REDIS,
                                                                      REDIS_URL)
    admin_url = _pg_admin_url()
    assert admin_url is not None
    assert not _exists(admin_url, fresh_database.rsplit("/", 1)[1])
    for name in ("Procfile", "orchestrator"):  # a checkout, as the README assumes
        (tmp_path / name).symlink_to(ROOT / name)
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REVISE_FLOWER_PORT": str(port),
           "REVISE_CELERY_QUEUE_PREFIX": f"readme{uuid.uuid4().hex[:8]}-",
           "REVISE_SANDBOX": "docker" if docker_ready(Settings()) else "process"}
    shell = subprocess.Popen(["bash", "-euo", "pipefail", "-c", script], cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, errors = shell.communicate(timeout=400)
        assert shell.returncode == 0, (out[-3000:], errors[-3000:],
                                       (tmp_path / "revise-stack.log").read_text()[-3000:])
        assert _exists(admin_url, fresh_database.rsplit("/", 1)[1])
        first = json.loads((tmp_path / "first.json").read_text())
        assert (first["status"], first["error"]["type"]) == ("failed", "CapabilityError")
        repair = json.loads(out[out.index('{\n  "run_id"'):out.index("\n}\n") + 2])
        assert (repair["status"], repair["revision"]) == ("succeeded", 2)
        assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (3, 1)
        assert "Revisions side by side" in (tmp_path / "scout.html").read_text()
        workers = _flower_workers(port, {"broker.1@", "broker.2@"})
        assert {"broker.1@", "broker.2@"} <= {w.split("@")[0] + "@" for w in workers}
    finally:
        try:
            os.killpg(shell.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        time.sleep(2)
        kill_processes_mentioning([str(tmp_path)])


def _flower_workers(port: int, prefixes: set[str], timeout: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout
    names: list[str] = []
    while time.monotonic() < deadline:
        try:
            names = list(httpx.get(f"http://127.0.0.1:{port}/api/workers", timeout=5).json())
        except (httpx.HTTPError, ValueError):
            names = []
        if all(any(n.startswith(p) for n in names) for p in prefixes):
            break
        time.sleep(0.5)
    return names

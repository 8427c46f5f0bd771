"""A run store a newer Revise migrated (a rollback, or an older host beside a newer one).

Every process opens the store through ``SqlStore.open``, which migrates a schema that is
not at head. A schema *ahead* of this code cannot be migrated: the operator must be told
so in one error (JSON under ``--json``), never sent to `revise db upgrade` (which cannot
go down), and never shown Alembic's traceback; a worker's preflight says it in one line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from broker.migrations import upgrade
from broker.schema import SCHEMA_HEAD

AHEAD = "0099"


def _revise(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *argv], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **env, "COLUMNS": "200"})


@pytest.fixture
def ahead_url(postgres_url: str) -> str:
    engine = create_engine(postgres_url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": AHEAD})
    engine.dispose()
    return postgres_url


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["runs"], ["show", "R"],
                                  ["submit", "SCRIPT", "--run-id", "r1", "--timeout", "5"]])
def test_a_store_ahead_of_this_code_is_one_json_error_naming_it(
        ahead_url: str, redis_url: str, tmp_path: Path, argv: list[str]) -> None:
    script = tmp_path / "s.py"
    script.write_text("async def orchestrate(ctx, args):\n    return 1\n")
    argv = [str(script) if a == "SCRIPT" else a for a in argv]
    env = {"REVISE_HOME": str(tmp_path / "home"), "REVISE_DATABASE_URL": ahead_url,
           "REVISE_REDIS_URL": redis_url, "REVISE_CELERY_QUEUE_PREFIX": "t2op"}
    done = _revise(env, *argv, "--json")
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode != 0
    error = json.loads(done.stdout)["error"]
    assert AHEAD in error["message"] and SCHEMA_HEAD in error["message"], error
    # the fix is a newer Revise here, not `revise db upgrade` (it cannot migrate down)
    assert "newer" in error["message"], error


def test_a_worker_preflight_names_a_store_ahead_in_one_line(
        ahead_url: str, redis_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"),
           "REVISE_DATABASE_URL": ahead_url, "REVISE_REDIS_URL": redis_url,
           "REVISE_CELERY_QUEUE_PREFIX": "t2op"}
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q",
             "t2opdispatch", "-n", "t2op@%h", "--pool", "threads", "-c", "1", "-l", "INFO"],
            stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and "ready." not in log.read_text():
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
        proc.wait(30)
    text_ = log.read_text()
    assert "Traceback" not in text_, text_[-3000:]
    assert any("ERROR" in line and AHEAD in line for line in text_.splitlines()), text_[-3000:]

"""Outages name the service, host and port, never a password; a script that runs out of
memory says so with its limit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.errors import StoreUnavailable
from broker.outage import describe, queue_unavailable
from broker.sqlstore import SqlStore

ROOT = Path(__file__).resolve().parents[2]
DEAD = "127.0.0.1:6390"  # nothing listens here


def test_describe_names_service_host_and_port_only() -> None:
    assert describe("redis://:hunter2@10.0.0.5/3") == "Redis at 10.0.0.5:6379 (db 3)"
    assert describe("postgresql+psycopg://ana:secret@db:5499/revise") == (
        "PostgreSQL at db:5499 (database revise)")
    assert describe("sqlite:////var/lib/revise/runs.db") == (
        "SQLite (file /var/lib/revise/runs.db)")
    stop = queue_unavailable("redis://:hunter2@h:1/0", "sending a job",
                             ConnectionError("cannot reach redis://:hunter2@h:1/0"))
    assert "Redis at h:1 (db 0) is unavailable while sending a job" in stop.message
    assert "hunter2" not in stop.message and (stop.host, stop.port) == ("h", 1)


def test_a_dead_database_is_named_without_its_password() -> None:
    with pytest.raises(StoreUnavailable) as caught:
        SqlStore.open("postgresql+psycopg://ana:secret@127.0.0.1:5499/revise")
    message = caught.value.message
    assert "the run store (PostgreSQL at 127.0.0.1:5499 (database revise)) is unavailable" \
        in message
    assert "secret" not in message and (caught.value.host, caught.value.port) == (
        "127.0.0.1", 5499)


def test_revise_submit_against_a_dead_redis_names_it(tmp_path: Path) -> None:
    """It waits the outage out within --timeout, saying what for, then exits 3."""
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "submit",
         str(ROOT / "tests" / "fixtures" / "scripts" / "e3_v2.py"), "--run-id", "x", "--json",
         "--timeout", "3"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "REVISE_HOME": str(tmp_path / "home"), "COLUMNS": "300",
             "REVISE_REDIS_URL": f"redis://:hunter2@{DEAD}/0"})
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == 3
    assert json.loads(done.stdout)["error"]["code"] == "queue_unavailable"
    assert f"Redis at {DEAD} (db 0) is unavailable" in " ".join(done.stderr.split())
    assert "hunter2" not in done.stdout + done.stderr


def test_a_script_out_of_memory_says_so_with_its_limit(tmp_path: Path) -> None:
    script = tmp_path / "hog.py"
    # A repetition by a count from args is refused by the checker (R00): double instead.
    script.write_text("async def orchestrate(ctx, args):\n    blob = args[\"s\"]\n"
                      "    for i in range(40):\n        blob = blob + blob\n"
                      "    return len(blob)\n")
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"s": "xxxxxxxx"}))
    done = subprocess.run(
        [sys.executable, "-m", "workers.cli", "run", str(script), "--run-id", "hog",
         "--args", str(args), "--json"], capture_output=True, text=True, cwd=tmp_path,
        timeout=120, env={**os.environ, "REVISE_HOME": str(tmp_path / "home"),
                          "REVISE_SANDBOX": "process"})
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "MemoryError"
    assert error["message"] == "the script ran out of memory (limit 512 MiB)"


def test_telling_an_outage_imports_neither_redis_nor_kombu() -> None:
    """The CLI asks this of every exit; importing the clients to answer took 0.1 s."""
    probe = ("import sys\nfrom broker.outage import is_queue_outage\n"
             "assert not is_queue_outage(RuntimeError('exit 1'))\n"
             "assert not {'redis', 'kombu'} & set(sys.modules), 'imported'\n"
             "import redis\nassert is_queue_outage(redis.ConnectionError('down'))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr

"""`revise artifact get` and `revise show` read artifacts from the store the settings name,
from any REVISE_HOME: the bytes live in PostgreSQL or S3, not under the writer's HOME."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.artifact_stores import open_artifact_store
from broker.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"


def _revise(home: Path, env: dict[str, str], *argv: str, code: int = 0) -> Any:
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                          capture_output=True, text=True, cwd=home, timeout=120,
                          env={**os.environ, "REVISE_HOME": str(home),
                               "REVISE_SANDBOX": "process", **env})
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return json.loads(done.stdout) if "--json" in argv else done.stdout


def test_a_run_on_postgresql_keeps_its_artifacts_there(tmp_path: Path, postgres_url: str):
    env = {"REVISE_DATABASE_URL": postgres_url}
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b"]}))
    writer = tmp_path / "writer"
    run = _revise(writer, env, "run", str(SCRIPTS / "fanout_repaired.py"), "--run-id", "R",
                  "--args", str(args), "--json")
    assert run["status"] == "succeeded"
    assert not (writer / "artifacts").exists(), "the default store on PostgreSQL is the database"

    reader = tmp_path / "reader"  # another REVISE_HOME: nothing of the writer's on disk
    shown = _revise(reader, env, "show", "R", "--json")
    assert {a["id"] for a in shown["artifacts"]} == set(run["result"])
    first = shown["artifacts"][0]
    assert first["store"] == "the PostgreSQL run store" and first["media_type"] == "image/png"
    assert first["fetch"] == f"revise artifact get {first['id']} -o FILE"
    got = _revise(reader, env, "artifact", "get", first["uri"], "-o",
                  str(reader / "one.png"), "--json")
    data = (reader / "one.png").read_bytes()
    assert got["bytes"] == len(data) == first["bytes"]
    assert f"sha256:{hashlib.sha256(data).hexdigest()}" == first["id"]
    assert list(reader.glob(".one.png.*")) == [], "no temporary file left behind"
    human = _revise(reader, {**env, "COLUMNS": "200"}, "show", "R")
    assert "in the PostgreSQL run store; fetch one with `revise artifact get ID -o FILE`" in human
    assert first["id"] in human


def test_artifact_get_from_s3_and_its_errors(tmp_path: Path, s3_env: dict[str, str]):
    settings = Settings(artifact_store="s3", **{k.removeprefix("REVISE_").lower(): v
                                               for k, v in s3_env.items()})
    ref = open_artifact_store(settings).put(b"\x89PNG bytes", "image/png")
    env = {**s3_env, "REVISE_ARTIFACT_STORE": "s3"}
    home = tmp_path / "elsewhere"
    got = _revise(home, env, "artifact", "get", ref.id, "-o", str(home / "x.png"), "--json")
    assert (home / "x.png").read_bytes() == b"\x89PNG bytes"
    assert got["store"] == f"s3://{s3_env['REVISE_S3_BUCKET']}/t/"

    missing = "sha256:" + "0" * 64
    out = _revise(home, env, "artifact", "get", missing, "-o", str(home / "m"), "--json",
                  code=2)
    assert f"{missing} is not in s3://" in out["error"]["message"]
    assert not (home / "m").exists()
    out = _revise(home, env, "artifact", "get", "sha256:nothex", "-o", str(home / "m"),
                  "--json", code=2)
    assert "is not an artifact id" in out["error"]["message"]
    out = _revise(home, {**env, "REVISE_S3_BUCKET": ""}, "artifact", "get", ref.id, "-o",
                  str(home / "m"), "--json", code=2)
    assert "REVISE_S3_BUCKET" in out["error"]["message"]
    out = _revise(home, {**env, "REVISE_S3_BUCKET": "no-such-bucket"}, "artifact", "get",
                  ref.id, "-o", str(home / "m"), "--json", code=2)
    assert "does not exist" in out["error"]["message"]


@pytest.mark.parametrize("kind", ["database", "s3"])
def test_the_default_store_follows_the_run_store(kind: str) -> None:
    pg = "postgresql+psycopg://u@h/db"
    assert Settings(database_url=pg).resolved_artifact_store == "database"
    assert Settings(database_url=None).resolved_artifact_store == "file"
    assert Settings(database_url=None, artifact_store=kind).resolved_artifact_store == kind

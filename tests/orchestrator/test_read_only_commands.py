"""Read-only commands never migrate the run store (issue 25 item 4, issue 29 item 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine

from broker.migrations import head_revision, upgrade
from broker.schema import stored_revision


def _revise(home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "REVISE_HOME": str(home), "COLUMNS": "200"})


def test_an_older_schema_is_named_and_left_as_it_is(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    engine = create_engine(f"sqlite:///{home / 'revise.db'}")
    upgrade(engine, "0005")
    for argv in (["runs"], ["show", "R"], ["attempts", "--unresolved"]):
        done = _revise(home, *argv, "--json")
        assert done.returncode != 0 and "Traceback" not in done.stderr, argv
        message = json.loads(done.stdout)["error"]["message"]
        assert "schema 0005" in message and "revise db upgrade" in message, message
    assert stored_revision(engine) == "0005"  # nothing migrated it
    assert _revise(home, "runs", "--json").returncode != 0
    upgrade(engine)
    assert stored_revision(engine) == head_revision()
    assert json.loads(_revise(home, "runs", "--json").stdout) == {"runs": []}
    engine.dispose()


def test_runs_on_a_store_nothing_ran_in_lists_none_and_creates_no_schema(tmp_path: Path
                                                                         ) -> None:
    home = tmp_path / "home"
    done = _revise(home, "runs", "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == {"runs": []}
    engine = create_engine(f"sqlite:///{home / 'revise.db'}")
    assert stored_revision(engine) is None
    engine.dispose()

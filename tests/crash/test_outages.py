"""Outages fail closed: a clear error and zero provider executions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .kit import provider_lines

ROOT = Path(__file__).resolve().parents[2]


def test_store_down_gives_a_clear_error_and_spends_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "REVISE_HOME": str(home), "REVISE_SANDBOX": "process",
           "REVISE_DATABASE_URL": "postgresql+psycopg://revise@127.0.0.1:1/revise"}
    done = subprocess.run([sys.executable, "-m", "workers.cli", "run",
                           str(ROOT / "tests/fixtures/scripts/crash_seq.py"), "--run-id", "r",
                           "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "StoreUnavailable"
    assert "127.0.0.1:1" in error["message"] and "Traceback" not in done.stderr
    assert provider_lines(home) == []



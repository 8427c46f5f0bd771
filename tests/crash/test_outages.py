"""Outages fail closed: a clear error and zero provider executions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import redis

from broker.envelope import Envelope
from broker.settings import LedgerPolicy
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner
from workers.ledger_redis import RedisLedger

from .kit import provider_lines, script, settings_for

ROOT = Path(__file__).resolve().parents[2]


def test_store_down_gives_a_clear_error_and_spends_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "REVISE_HOME": str(home), "REVISE_SANDBOX": "process",
           "REVISE_DATABASE_URL": "postgresql+psycopg://revise@127.0.0.1:1/revise"}
    done = subprocess.run([sys.executable, "-m", "orchestrator.cli", "run",
                           str(ROOT / "tests/fixtures/scripts/crash_seq.py"), "--run-id", "r",
                           "--json"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "StoreUnavailable"
    assert "127.0.0.1:1" in error["message"] and "Traceback" not in done.stderr
    assert provider_lines(home) == []


def test_redis_ledger_down_fails_closed_before_dispatch(tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = open_services(settings_for(home), runner=ProcessRunner())
    try:
        services.ledger = RedisLedger(redis.Redis(host="127.0.0.1", port=1,
                                                  socket_connect_timeout=0.5),
                                      slots=services.store.list_slots)
        report = services.pipeline().run("r", script("crash_seq"), {},
                                         Envelope(ledger_policy=LedgerPolicy.AUTO)).to_json()
    finally:
        services.close()
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "LedgerUnavailable"
    assert report["calls"]["executed"] == 0
    assert provider_lines(home) == []


def test_redis_ledger_down_with_explicit_opt_out_proceeds(tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = open_services(settings_for(home), runner=ProcessRunner())
    try:
        services.ledger = RedisLedger(redis.Redis(host="127.0.0.1", port=1,
                                                  socket_connect_timeout=0.5),
                                      slots=services.store.list_slots, fail_closed=False)
        report = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
    finally:
        services.close()
    assert report["status"] == "succeeded"
    assert len(provider_lines(home)) == 2

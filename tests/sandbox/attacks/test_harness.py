"""The judge is not vacuous: each kind of breach it looks for is reported when staged."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.records import RunStatus
from broker.settings import Settings
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner

from .corpus import Attack
from .harness import ENV_SECRET, Canary, Victim, judge

ATTACK = Attack("staged", "process", "async def orchestrate(ctx, args):\n    return 1\n", "x")
CLEAN = {"status": "failed", "error": {"type": "FileNotFoundError"}, "result": None}


@pytest.fixture
def staged(tmp_path: Path):
    canary = Canary()
    victim = Victim(tmp_path / "victim")
    services = open_services(Settings(home=tmp_path / "home"), runner=ProcessRunner())

    def verdict(report=CLEAN, *, elapsed: float = 1.0, marker: str = "nomarkerhere") -> list:
        return judge(ATTACK, services, "staged", report, elapsed, victim=victim,
                     before=before, canary=canary, canary_before=0, marker=marker, slack=5)

    before = victim.snapshot()
    yield SimpleNamespace(verdict=verdict, victim=victim, canary=canary, services=services)
    canary.close()
    services.close()


def test_a_clean_run_is_contained(staged) -> None:
    assert staged.verdict() == []


def test_each_staged_breach_is_reported(staged) -> None:
    assert staged.verdict({**CLEAN, "result": staged.victim.token})
    assert staged.verdict({**CLEAN, "error": {"type": "X", "message": ENV_SECRET}})
    assert staged.verdict({**CLEAN, "status": "running"})
    assert staged.verdict(elapsed=60.0)
    (staged.services.settings.home / "leak.txt").write_text(staged.victim.token)
    assert any("landed" in p for p in staged.verdict())
    (staged.services.settings.home / "leak.txt").unlink()
    (staged.victim.root / "planted").write_text("x")
    assert "the victim dir changed" in staged.verdict()
    (staged.victim.root / "planted").unlink()
    store = staged.services.store
    store.ensure_run("staged")
    assert "the run was left running" in staged.verdict()
    store.set_run_status("staged", RunStatus.STOPPED)
    assert staged.verdict() == []


def test_a_connection_and_a_leftover_process_are_reported(staged) -> None:
    socket.create_connection(("127.0.0.1", staged.canary.port), timeout=2).close()
    marker = "stagedmarker0123456789"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", marker])
    try:
        problems = staged.verdict(marker=marker)
    finally:
        child.kill()
        child.wait()
    assert any("canary" in p for p in problems), problems
    assert any("processes left" in p for p in problems), problems

"""``bench/peers.py``: Revise's part runs quickly (embedded and through the Celery stack);
the Temporal and DBOS columns need the ``peers`` extra and are left to the bench."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.checker import check

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

from peers.revise import fanout_script, repair_script, sequential_script  # noqa: E402


@pytest.mark.parametrize("text", [sequential_script(50), fanout_script(32),
                                  repair_script(32, repaired=False),
                                  repair_script(32, repaired=True)])
def test_the_bench_scripts_pass_the_checker(text: str) -> None:
    assert check(text).valid


@pytest.mark.redis
@pytest.mark.postgres
def test_quick_run_of_revise_prints_every_figure(postgres_url: str, redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--quick", "--peers", "revise",
         "--database-url", postgres_url, "--redis-url", redis_url],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    for row in ("10 sequential no-op calls", "8-way fanout", "replay of 10 recorded calls",
                "4 concurrent jobs x 4 calls"):
        line = next(line for line in out.splitlines() if line.startswith(f"| {row}"))
        cells = [c.strip() for c in line.strip("|").split("|")[1:]]
        assert any(c not in ("-", "") for c in cells), line
    assert "Revise Celery, 2 broker workers" in out
    jobs = next(line for line in out.splitlines() if line.startswith("| 4 concurrent jobs"))
    header = next(line for line in out.splitlines() if line.startswith("| work |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    for floor in ("Celery floor, 1 broker worker", "Celery floor + writes, 1 broker worker"):
        assert float(jobs.strip("|").split("|")[columns.index(floor)]) > 0, jobs  # it ran
    assert re.search(r"floor: bare hops >= 0.8x DBOS's +not measured", out), out
    cpu = next(line for line in out.splitlines()
               if line.startswith("| 4 concurrent jobs x 4 calls, CPU ms per call"))
    for column in ("Revise Celery, 1 broker worker", "Celery floor, 1 broker worker",
                   "Celery floor + writes, 1 broker worker"):
        assert float(cpu.strip("|").split("|")[columns.index(column)]) > 0, cpu
    assert re.search(r"CPU per call <= 1.3x floor \+ writes +\d+\.\d\dx +(met|NOT met)", out)
    for floor in ("floor", "floor \\+ writes"):
        assert re.search(rf"Revise / {floor} +\d+\.\d\dx", out), out
    assert "| N = 4 | 5 | 8 |" in out  # call-level replay: N + 1 paid, a full rerun 2N
    assert re.search(r"checker p50 <= 5x ast.parse +\d+\.\d\dx", out), out
    assert re.search(r"revise --help <= 200 ms +\d+ ms", out), out


@pytest.mark.redis
@pytest.mark.postgres
def test_slow_workload_of_revise_prints_its_row(redis_url: str) -> None:
    """Issue 26's workload, small: every job charged exactly its calls, none twice."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--slow", "3", "--slow-calls", "2",
         "--slow-latency", "0.2", "--peers", "revise"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                       "REVISE_BENCH_REDIS_URL": redis_url},
        capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "N jobs x 2 sequential image calls, each answered after 0.2 s" in done.stdout
    assert re.search(r"^\| 3 \| revise \| \d+\.\dx \| [1-6] \| 6 / 6 \| 0 \| \d+ MB \| \d+ MB \|$",
                     done.stdout, re.MULTILINE), done.stdout

"""The diagnostic benches run end to end on small workloads and print every figure:
``bench/cpu_split.py`` (CPU per job and per call by process, Revise beside the floor
with writes) and ``bench/slow_timeline.py`` (a slow job's stages from the run store and
the cores each process used while the jobs started)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_NUMBER = r"-?\d+\.\d\d"


def _run(args: list[str], redis_url: str) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT),
                               "REVISE_BENCH_REDIS_URL": redis_url},
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.redis
@pytest.mark.postgres
def test_cpu_split_prints_each_process_per_job_and_per_call(postgres_url: str,
                                                            redis_url: str) -> None:
    out = _run([str(ROOT / "bench" / "cpu_split.py"), "--jobs", "2", "--calls", "12",
                "--rounds", "1", "--database-url", postgres_url, "--redis-url", redis_url],
               redis_url)
    rows = {cells[0]: cells[1:] for line in out.splitlines() if line.startswith("| ")
            for cells in [[c.strip() for c in line.strip("|").split("|")]]}
    assert rows["process"] == ["per job, Revise", "per job, floor + writes",
                               "per call, Revise", "per call, floor + writes"], out
    for process in ("dispatcher", "sandbox worker and its sandboxes", "broker worker",
                    "PostgreSQL", "Redis", "all"):
        assert all(re.fullmatch(_NUMBER, cell) for cell in rows[process]), out
    assert float(rows["sandbox worker and its sandboxes"][0]) > 0, out  # a job ran there
    assert float(rows["all"][2]) > 0, out  # and its calls cost something


@pytest.mark.redis
@pytest.mark.postgres
def test_slow_timeline_prints_every_stage_and_the_cores(redis_url: str) -> None:
    out = _run([str(ROOT / "bench" / "slow_timeline.py"), "--jobs", "3", "--calls", "2",
                "--latency", "0.2"], redis_url)
    assert "3 jobs, times after the first admission:" in out, out
    for stage in ("admitted -> revision started", "revision started -> first claim"):
        assert re.search(rf"{stage}: median \d+\.\d+ s, slowest \d+\.\d+ s", out), out
    assert re.search(r"call 0: claim -> take median .* take -> answer median .* answer -> "
                     r"next claim median", out), out
    assert re.search(r"call 1: claim -> take median .* take -> answer median \d", out), out
    assert re.search(r"while the jobs started \(\d+\.\d s\): \d+\.\d\d cores in use; .*"
                     r"sandbox worker \d", out), out
    assert "'charged': 6, 'duplicates': 0" in out, out  # every job paid its 2 calls once

"""``bench/parking.py`` runs end to end on a small workload and prints every figure: the
admission-alone rate, and per parking mode makespan / ideal, peak calls in flight, calls
paid against expected, PSS and the submit and admit rates."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.redis
@pytest.mark.postgres
def test_a_short_run_prints_admission_and_every_column(redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "parking.py"), "--jobs", "3", "--calls", "2",
         "--latency", "0.2", "--park-after", "0", "--admission", "20"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                       "REVISE_BENCH_REDIS_URL": redis_url},
        capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert re.search(r"admission alone, 20 jobs at once: submitted \d+ / s, admitted "
                     r"\d+\.\d / s", out), out
    rows = [line for line in out.splitlines() if line.startswith("| 3 |")]
    assert [row.split("|")[2].strip().split(" ")[0] for row in rows] == \
        ["off", "as", "after"], out
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert re.fullmatch(r"\d+\.\dx", cells[2]), row
        assert cells[4] == "6 / 6", row  # every job paid exactly its 2 calls
        assert all(re.fullmatch(r"\d+ MB", c) for c in cells[5:7]), row

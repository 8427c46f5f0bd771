"""``bench/core.py`` runs end to end on a tiny size and prints each of its figures (it
once crashed on the typed run report without anyone noticing)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_prints_every_figure(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "core.py"), "--samples", "1", "--calls", "3"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "REVISE_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    for figure in ("checker over", "gate at 200 frozen sites", "certificate at 200 sites",
                   "embedded per-call cost over 3 sequential calls"):
        assert figure in done.stdout, done.stdout

"""``bench/sandbox_overhead.py --runtime-start`` runs and prints its three figures."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_runtime_start_prints_bare_source_and_compiled(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "sandbox_overhead.py"), "--runtime-start",
         "--runs", "2"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "REVISE_HOME": str(tmp_path)},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    for way in ("bare interpreter", "runtime.py", "runtime.pyc"):
        assert re.search(rf"^{re.escape(way)}.* \d+\.\d +\d+\.\d\d$", done.stdout,
                         re.MULTILINE), done.stdout

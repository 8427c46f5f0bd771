"""Issue 13's tool targets, measured in the same run as the peers: the checker's p50
against ``ast.parse`` of the same scripts, and the wall time of ``revise --help``."""

from __future__ import annotations

import ast
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = [*sorted((ROOT / "tests" / "fixtures" / "scripts").glob("*.py")),
          *sorted((ROOT / "tests" / "fixtures" / "checker" / "valid").glob("*.txt")),
          *sorted((ROOT / "orchestrator" / "demo").glob("*.script"))]


def checker_samples(samples: int) -> tuple[list[float], list[float]]:
    """Milliseconds of the checker and of ``ast.parse``, ``samples`` times per script of
    ``CORPUS`` (the fixture, checker and demo scripts)."""
    from orchestrator.checker import check

    checked, parsed = [], []
    for text in (p.read_text(encoding="utf-8") for p in CORPUS):
        for _ in range(samples):
            started = time.perf_counter()
            check(text)
            checked.append(1000 * (time.perf_counter() - started))
            started = time.perf_counter()
            ast.parse(text)
            parsed.append(1000 * (time.perf_counter() - started))
    return checked, parsed


def checker_ratio(samples: int) -> float:
    """p50 of the checker over p50 of ``ast.parse`` on the same scripts."""
    checked, parsed = checker_samples(samples)
    return statistics.median(checked) / statistics.median(parsed)


def help_ms(samples: int) -> float:
    """Median wall time of the installed ``revise --help`` (the console script next to this
    interpreter; ``python -m workers.cli`` where it is not installed)."""
    script = Path(sys.executable).with_name("revise")
    command = [str(script)] if script.exists() else [sys.executable, "-m",
                                                     "workers.cli"]
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        subprocess.run([*command, "--help"], check=True, stdout=subprocess.DEVNULL,
                       cwd=ROOT)
        times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times)

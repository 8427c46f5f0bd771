"""`revise --help` stays fast: it loads no pydantic, HTTP client, checker or store (they load
inside the commands that use them). Checked by module, not by time: machines are noisy."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pydantic", "pydantic_settings", "httpx", "sqlalchemy", "celery", "docker",
         "orchestrator.checker", "broker.settings", "broker.envelope", "orchestrator.models")


def test_help_loads_none_of_the_heavy_modules() -> None:
    probe = ("import runpy, sys\n"
             "sys.argv = ['revise', '--help']\n"
             "try:\n"
             "    runpy.run_module('workers.cli', run_name='__main__')\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(' '.join(sorted(sys.modules)), file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert "submit" in done.stdout and "repair" in done.stdout, done.stdout + done.stderr
    loaded = set(done.stderr.split())
    assert sorted(name for name in HEAVY if name in loaded) == []

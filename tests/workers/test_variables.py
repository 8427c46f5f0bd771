"""Which REVISE_* variables something reads, and the warning for one nothing reads."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from workers.variables import known_variables, unknown_variables

ROOT = Path(__file__).resolve().parents[2]
MISSPELLING = {"test_variables.py", "test_config_cli.py", "test_submit_cli.py"}  # on purpose


def test_unknown_variables_get_the_nearest_name_across_every_settings_class() -> None:
    found = {u.name: u.nearest for u in unknown_variables({
        "REVISE_DATABSE_URL": "", "revise_celery_queue_prefx": "", "REVISE_PROCES_UID": "",
        "REVISE_ZZZZZZ": "", "REVISE_HOME": "", "REVISE_CELERY_WAVE_CHUNK": "",
        "REVISE_PROCESS_BWRAP": "", "PATH": ""})}
    assert found == {"REVISE_DATABSE_URL": "REVISE_DATABASE_URL",
                     "REVISE_CELERY_QUEUE_PREFX": "REVISE_CELERY_QUEUE_PREFIX",
                     "REVISE_PROCES_UID": "REVISE_PROCESS_UID", "REVISE_ZZZZZZ": None}


def test_every_revise_variable_the_repository_uses_is_known() -> None:
    """compose.yaml, the Procfile, shell scripts, tests and benchmarks read REVISE_* names
    outside the settings classes: none of them may be reported as a misspelling."""
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    used: set[str] = set()
    for name in files:
        path = ROOT / name
        if path.suffix in {".py", ".sh", ".yaml", ".yml", ".md", ""} and path.is_file() \
                and path.name not in MISSPELLING:
            used |= set(re.findall(r"\bREVISE_[A-Z0-9_]*[A-Z0-9]\b",
                                   path.read_text(encoding="utf-8", errors="replace")))
    prefixes = {"REVISE_CELERY", "REVISE_MODEL", "REVISE_PROCESS", "REVISE_S3"}  # "REVISE_S3_*"
    assert sorted(used - prefixes - known_variables()) == []




def test_a_worker_warns_once_when_it_loads_the_app() -> None:
    """Every role loads ``workers.app``: a misspelt variable is a warning line there too."""
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("REVISE_")}
    done = subprocess.run([sys.executable, "-c", "import workers.app"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120,
                          env={**clean, "REVISE_CELERY_WAVE_CHUNKS": "4"})
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "REVISE_CELERY_WAVE_CHUNKS is not a Revise setting and is ignored; did you mean "
        "REVISE_CELERY_WAVE_CHUNK?"]

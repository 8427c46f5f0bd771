"""`--json` promises one JSON object on stdout, refusals included (`{"error": ...}`). A
usage error (a missing argument, an option value of the wrong type) is a refusal of the
command line, yet it prints click's usage text on stderr and nothing on stdout, so a
caller parsing stdout gets no JSON at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv", [
    ["submit", "--json"],                                         # SCRIPT missing
    ["submit", "SCRIPT", "--run-id", "r", "--timeout", "abc", "--json"],  # not a number
    ["run", "SCRIPT", "--json"],                                  # --run-id missing
    ["show", "--json"],                                           # R missing
])
def test_a_usage_error_under_json_is_one_json_error(tmp_path: Path, argv: list[str]) -> None:
    script = tmp_path / "s.py"
    script.write_text("async def orchestrate(ctx, args):\n    return 1\n")
    argv = [str(script) if a == "SCRIPT" else a for a in argv]
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "workers.cli", *argv], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 2, done
    error = json.loads(done.stdout)["error"]  # fails today: stdout is empty
    assert error["type"] and error["code"] and error["message"], error

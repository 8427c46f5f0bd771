"""A lease setting far larger than anyone needs ("never expire": 1e11, inf) is accepted by
the settings and by `revise config --check`, so it must not kill the heartbeat threads
that wait a third of it: the thread dies with Python's own traceback on stderr (no
ERROR record, no heartbeat from then on)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """\
async def orchestrate(ctx, args):
    shot = await ctx.run("image.generate", {"prompt": "dawn", "size": "256x256"})
    return shot["artifact"]["id"]
"""


@pytest.mark.parametrize("setting", ["REVISE_ATTEMPT_LEASE_SECONDS",
                                     "REVISE_REVISION_LEASE_SECONDS"])
@pytest.mark.parametrize("value", ["1e11", "inf"])
def test_a_huge_lease_accepted_by_config_check_kills_no_thread(
        tmp_path: Path, setting: str, value: str) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_SANDBOX": "process",
           setting: value}
    for key in ("REVISE_DATABASE_URL", "REVISE_REDIS_URL"):
        env.pop(key, None)
    check = subprocess.run([sys.executable, "-m", "workers.cli", "config", "--check"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert check.returncode == 0, check.stdout + check.stderr  # accepted as valid
    done = subprocess.run([sys.executable, "-m", "workers.cli", "run", str(script),
                           "--run-id", "huge", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert json.loads(done.stdout)["status"] == "succeeded", done.stdout[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]

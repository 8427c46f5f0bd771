"""Ctrl-C on an embedded `revise run` mid-call leaves its revision `running` for good.

The process waits for the call in flight (it commits: nothing is lost) and exits 130, but
the revision and the run stay `running` in `revise runs` and `revise show` long after its
lease (nothing sweeps an embedded store), though no process owns it: the contract says no
path leaves a revision running, and a fault the host did not foresee fails the revision
at once as lost, naming it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAIServer, slow

SCRIPT = """\
async def orchestrate(ctx, args):
    a = await ctx.run("image.generate", {"prompt": "one", "size": "256x256"})
    b = await ctx.run("image.generate", {"prompt": "two", "size": "256x256"})
    return [a["artifact"]["id"], b["artifact"]["id"]]
"""


def test_ctrl_c_mid_call_does_not_leave_the_revision_running(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    with FakeOpenAIServer(api_key="k") as server:
        server.queue("/v1/images/generations", slow(3))
        env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"),
               "REVISE_SANDBOX": "process", "REVISE_PROVIDER": "http",
               "REVISE_PROVIDER_BASE_URL": server.base_url, "REVISE_PROVIDER_API_KEY": "k",
               "REVISE_REVISION_LEASE_SECONDS": "2"}
        for key in ("REVISE_DATABASE_URL", "REVISE_REDIS_URL"):
            env.pop(key, None)
        proc = subprocess.Popen([sys.executable, "-m", "workers.cli", "run", str(script),
                                 "--run-id", "ctrlc", "--json"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 60
        while not server.requests:
            assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)  # the operator's Ctrl-C
        proc.communicate(timeout=60)
        assert proc.returncode != 0
        time.sleep(4)  # twice the lease
        shown = subprocess.run([sys.executable, "-m", "workers.cli", "show", "ctrlc",
                                "--json"], capture_output=True, text=True, timeout=60,
                               env=env)
    report = json.loads(shown.stdout)
    assert report["slots"], report  # the paid call was committed
    assert report["run"]["status"] != "running", report["run"]
    assert [r["status"] for r in report["revisions"]] != ["running"], report["revisions"]

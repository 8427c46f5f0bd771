"""A full disk under the file artifact store (the embedded default, and `file` on a host)
turns a paid provider answer into an unresolved attempt: the provider charged for the
image, the host held its bytes, yet the put's ENOSPC is taken for a provider failure,
the run stops "ended without an answer ... it may have completed", and the bytes are
dropped, so `revise reconcile --result --artifact` has nothing to write back and the
operator's only way on is `--abandon` and paying again. The contract: a paid result is
never lost (a full spool or log disk falls back to another directory, then memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.openai_server import FakeOpenAIServer

from ..disks import full_disk

SCRIPT = """\
async def orchestrate(ctx, args):
    shot = await ctx.run("image.generate", {"prompt": "dawn", "size": "256x256"})
    return shot["artifact"]["id"]
"""


def test_a_paid_image_on_a_full_artifact_disk_is_kept_not_left_unresolved(tmp_path: Path
                                                                          ) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    with FakeOpenAIServer(api_key="k") as server, \
            full_disk(tmp_path / "home" / "artifacts"):
        env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_SANDBOX": "process",
               "REVISE_DATABASE_URL": f"sqlite:///{tmp_path / 'store' / 'revise.db'}",
               "REVISE_ARTIFACT_STORE": "file", "REVISE_PROVIDER": "http",
               "REVISE_PROVIDER_BASE_URL": server.base_url, "REVISE_PROVIDER_API_KEY": "k"}
        env.pop("REVISE_REDIS_URL", None)
        done = subprocess.run([sys.executable, "-m", "workers.cli", "run", str(script),
                               "--run-id", "full", "--json"], capture_output=True,
                              text=True, timeout=120, env=env)
        report = json.loads(done.stdout)
        # the provider did the work and charged for it
        assert server.charged() == 1, (report["status"], report["error"])
        # the host had the answer: it must not call it "ended without an answer"
        assert report["status"] == "succeeded", (report["error"], done.stderr[-3000:])
        assert report["calls"]["uncertain"] == 0, report["calls"]

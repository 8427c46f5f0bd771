"""The dispatcher's refusals through a real Celery stack carry their typed error: a
candidate the checker refuses (``revise submit --json`` shows its code, the run store
keeps it), a job whose dispatcher died at every delivery (``DispatchFailed``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.envelope import Envelope
from broker.errors import CheckFailed, DispatchFailed, error_from_json
from workers.client import _refusal

from .conftest import ROOT, script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

REFUSED = "import os\nasync def orchestrate(ctx, args):\n    while True:\n        pass\n"


def test_refusals_of_the_dispatcher_carry_their_code(make_stack, tmp_path) -> None:
    stack = make_stack()
    stack.worker("dispatch", concurrency=1)
    stack.wait_ready()

    bad = tmp_path / "bad.py"
    bad.write_text(REFUSED)
    done = subprocess.run([sys.executable, "-m", "workers.cli", "submit", str(bad),
                           "--run-id", "refused", "--wait", "--timeout", "60", "--json"],
                          capture_output=True, text=True, env=stack.env, cwd=ROOT, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["status"] == "stopped"
    assert (report["error"]["type"], report["error"]["code"]) == ("CheckFailed",
                                                                  "check_failed")
    assert {"R03", "R10"} <= set(report["error"]["rules"])
    stored = error_from_json(stack.store.get_revision("refused", 1).summary["error"])
    assert isinstance(stored, CheckFailed) and stored.rules == report["error"]["rules"]

    # Every earlier delivery of this job died in the dispatcher: the next one gives up.
    handle = stack.client.submit(script("e3_v2"), {}, Envelope(), "looped", send=False)
    lease = stack.context.lease
    lease._redis.set(lease._key(handle.job_id, "starts"), lease.max_deliveries)
    handle.send()
    with pytest.raises(DispatchFailed) as caught:
        handle.wait(60)
    assert caught.value.code == "dispatch_failed"
    assert (caught.value.job_id, caught.value.deliveries) == (handle.job_id,
                                                              lease.max_deliveries)
    assert stack.store.list_runs() == [stack.store.get_run("refused")]


def test_an_answer_that_describes_no_error_is_itself_a_dispatch_failure() -> None:
    """Anyone who can write to Redis can forge the dispatcher's answer."""
    for forged in ({"type": "os.system", "message": "x"}, "not a dict",
                   {"type": "CheckFailed", "message": "x", "rules": "R01", "lines": []}):
        refusal = _refusal("job-1", forged)
        assert isinstance(refusal, DispatchFailed) and refusal.job_id == "job-1"
        assert "holds no error this Revise knows" in refusal.message

"""`revise submit --wait` on a terminal says where the job is (issue 29, item 5): its
revision's calls committed and in flight, parked or not; without a terminal it says
nothing while it waits (only an outage is said)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from broker.envelope import Envelope

from .conftest import ROOT
from .test_parking import SEQUENTIAL

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _stack(make_stack):
    stack = make_stack(local_latency=1.5)
    stack.worker("dispatch")
    stack.worker("sandbox", concurrency=2)
    stack.worker("capabilities", concurrency=8)
    stack.wait_ready(120)
    return stack


def test_the_handle_tells_calls_committed_and_in_flight(make_stack) -> None:
    stack = _stack(make_stack)
    handle = stack.client.submit(SEQUENTIAL, {"prompts": ["a", "b", "c"]}, Envelope(), "told")
    seen: list[str] = []
    report = handle.wait(180, watch=seen.append)
    assert report["status"] == "succeeded", report["error"]
    assert any("revision 1 running: 1 committed, 1 in flight" in line for line in seen), seen
    assert handle.progress() == "run told revision 1 succeeded: 3 committed"


def _submit(stack, tmp_path, *, terminal: bool) -> tuple[int, str, str]:
    script = tmp_path / "seq.py"
    script.write_text(SEQUENTIAL)
    args = tmp_path / "args.json"
    args.write_text('{"prompts": ["a", "b"]}')
    run_id = f"cli-{'tty' if terminal else 'pipe'}"
    command = [sys.executable, "-m", "workers.cli", "submit", str(script), "--run-id", run_id,
               "--args", str(args), "--wait", "--json"]
    env = {**stack.env, "COLUMNS": "120"}
    if not terminal:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=180)
        return done.returncode, done.stdout, done.stderr
    main, side = pty.openpty()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=side, env=env, cwd=ROOT)
    os.close(side)
    seen = b""
    deadline = time.monotonic() + 180
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([main], [], [], 0.5)[0]:
            try:
                seen += os.read(main, 65536)
            except OSError:
                break
    out = proc.communicate(timeout=30)[0].decode()
    os.close(main)
    return proc.returncode, out, seen.decode(errors="replace")


def test_submit_wait_shows_progress_on_a_terminal_only(make_stack, tmp_path) -> None:
    stack = _stack(make_stack)
    code, out, err = _submit(stack, tmp_path, terminal=True)
    assert code == 0, out + err
    assert '"status": "succeeded"' in out
    assert "1 committed" in err and "in flight" in err, err
    code, out, err = _submit(stack, tmp_path, terminal=False)
    assert code == 0, out + err
    assert "waiting" not in err and "committed" not in err, err

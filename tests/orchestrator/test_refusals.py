"""Every refusal has its typed error: ``revise check/gate/run/repair --json`` show its
``type`` and ``code``, with the fields a program reads (rule ids, counterexamples, dropped
calls, digests), and the run store keeps it (``revise show`` reads it back whole)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker.errors import CheckFailed, GateRejected, ReplayDivergence, error_from_json
from orchestrator.checker import check
from orchestrator.refusals import calls_dropped, check_failed

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"
REFUSED = "import os\nasync def orchestrate(ctx, args):\n    while True:\n        pass\n"
EDITED_SITE = "orchestrate/#0>orchestrate.gen/#0"


@pytest.fixture
def revise(tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "REVISE_HOME": str(tmp_path / "home"),
           "REVISE_SANDBOX": "process"}

    def call(*argv: str, code: int) -> Any:
        done = subprocess.run([sys.executable, "-m", "workers.cli", *argv, "--json"],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)
        assert done.returncode == code, done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        return json.loads(done.stdout)

    return call


def script(name: str) -> str:
    return str(SCRIPTS / f"{name}.py")


def test_check_failed_carries_each_violations_rule_and_line() -> None:
    report = check(REFUSED)
    error = check_failed(report.violations)
    errors = [v for v in report.violations if v.severity == "error"]
    assert (error.rules, error.lines) == ([v.rule for v in errors], [v.line for v in errors])
    assert {"R03", "R10"} <= set(error.rules)
    assert error.message.startswith(f"the checker rejected the script ({len(errors)} ")


def test_calls_dropped_names_the_lines_of_the_failed_script() -> None:
    error = calls_dropped(1, 3, [9, 4])
    assert (error.code, error.calls, error.required_calls, error.dropped_lines) == (
        "calls_dropped", 1, 3, [4, 9])
    assert "lines 4, 9 of the failed script" in error.message


def test_check_gate_and_run_refusals_show_their_code_and_the_store_keeps_it(
        revise, tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(REFUSED)
    checked = revise("check", str(bad), code=1)
    assert (checked["error"]["type"], checked["error"]["code"]) == ("CheckFailed",
                                                                    "check_failed")
    assert checked["error"]["rules"] == [v["rule"] for v in checked["violations"]
                                         if v["severity"] == "error"]
    assert revise("check", script("e3_v2"), code=0)["error"] is None

    refused = revise("run", str(bad), "--run-id", "C", code=1)
    assert refused["status"] == "stopped" and refused["error"] == checked["error"]

    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    revise("run", script("fanout_v1"), "--run-id", "R", "--args", str(args), code=1)
    gated = revise("gate", script("fanout_edited"), "--run-id", "R", code=1)
    assert (gated["error"]["type"], gated["error"]["code"]) == ("GateRejected",
                                                                "gate_rejected")
    assert gated["error"]["counterexamples"] == gated["counterexamples"]
    assert revise("gate", script("fanout_repaired"), "--run-id", "R", code=0)["error"] is None
    stopped = revise("run", script("fanout_edited"), "--run-id", "R", code=1)
    assert stopped["error"]["code"] == "gate_rejected"
    assert [c["kind"] for c in stopped["error"]["counterexamples"]] == ["call_changed"]

    # A payload changed at a committed identity: the runtime's refusal.
    args.write_text(json.dumps({"shots": ["A", "b", "c", "d"]}))
    diverged = revise("run", script("fanout_repaired"), "--run-id", "R", "--args",
                      str(args), code=1)
    assert (diverged["error"]["type"], diverged["error"]["code"]) == ("ReplayDivergence",
                                                                      "replay_divergence")
    assert diverged["error"]["identity"] == f"{EDITED_SITE}@0:0"
    assert diverged["error"]["digest"] != diverged["error"]["committed_digest"]

    # What the store kept reads back as the typed error, fields and all.
    shown = revise("show", "R", code=0)["revisions"]
    stored = [error_from_json(r["error"]) for r in shown[1:]]
    assert [type(e) for e in stored] == [GateRejected, ReplayDivergence]
    assert stored[0].counterexamples == stopped["error"]["counterexamples"]
    assert stored[1].digest == diverged["error"]["digest"]
    kept = error_from_json(revise("show", "C", code=0)["revisions"][0]["error"])
    assert isinstance(kept, CheckFailed) and kept.rules == checked["error"]["rules"]


def test_each_refused_repair_round_shows_its_code(revise, tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    revise("run", script("fanout_v1"), "--run-id", "R", "--args", str(args), code=1)
    answers = ["I cannot help with that.", _fenced(REFUSED),
               _fenced(Path(script("fanout_edited")).read_text()),
               _fenced("async def orchestrate(ctx, args):\n    return 1\n")]
    model = tmp_path / "model.jsonl"
    model.write_text("".join(json.dumps({"purpose": "repair", "output": a}) + "\n"
                             for a in answers))
    repair = revise("repair", "--run-id", "R", "--model", f"recorded:{model}",
                    "--max-attempts", "4", code=4)
    rounds = [(r["refused_by"], [e["code"] for e in r["errors"]], r["error"]["code"])
              for r in repair["attempts"]]
    assert rounds == [
        (["extract"], ["no_script"], "no_script"),
        (["check", "gate", "call_count"], ["check_failed", "gate_rejected", "calls_dropped"],
         "check_failed"),
        (["gate"], ["gate_rejected"], "gate_rejected"),
        (["gate", "call_count"], ["gate_rejected", "calls_dropped"], "gate_rejected")]
    # The failed script's one call expression is in a fanout over args["shots"][:32]: it
    # can make 32 calls, the candidate none.
    dropped = repair["attempts"][3]["errors"][1]
    assert (dropped["counted"], dropped["calls"], dropped["required_calls"]) == (
        "calls", 0, 32)
    assert repair["outcome"] == "no_candidate"
    assert repair["error"] == repair["attempts"][-1]["error"]


def _fenced(text: str) -> str:
    return f"Here it is.\n\n```python\n{text}```\n"

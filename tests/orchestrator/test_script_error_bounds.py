"""Every field of the error a sandbox reports is bounded before it is stored (issue 28,
item 2): a sandbox that ignores the checker sent a 3.5 MB identity, which went whole into
the stored report and `--json`."""

from __future__ import annotations

import json
from types import SimpleNamespace

from broker.envelope import Envelope
from orchestrator.session import Session


def test_each_error_field_of_a_hostile_result_is_cut() -> None:
    huge = "x" * 3_500_000
    message = {"ok": False, "logs": [], "error": {
        "type": huge, "message": huge, "identity": huge, "capability": huge, "code": huge,
        "status": huge, "charged": huge, "line": 3, "planted": huge}}
    host = SimpleNamespace(envelope=Envelope(), _state=SimpleNamespace(failed_answers={}))
    outcome = Session._outcome(host, message)  # type: ignore[arg-type]
    error = outcome["error"]
    assert "planted" not in error and error["line"] == 3
    assert all(len(v) <= 4000 for v in error.values() if isinstance(v, str))
    assert len(json.dumps(outcome)) < 40_000


def test_a_scripts_own_error_has_the_script_error_code_and_cannot_pose_as_the_hosts() -> None:
    host = SimpleNamespace(envelope=Envelope(), _state=SimpleNamespace(failed_answers={}))

    def ended_with(error: dict) -> dict:
        message = {"ok": False, "logs": [], "error": error}
        return Session._outcome(host, message)["error"]  # type: ignore[arg-type]

    assert ended_with({"type": "KeyError", "message": "'url'", "line": 3}) == {
        "type": "KeyError", "code": "script_error", "message": "'url'", "line": 3}
    posed = ended_with({"type": "BudgetExceeded", "code": "budget_exceeded", "message": "m"})
    assert (posed["type"], posed["code"]) == ("ScriptError", "script_error")
    assert posed["message"] == "the script raised an error named BudgetExceeded: m"

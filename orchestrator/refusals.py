"""The typed error of each refusal before anything runs: the checker, the gate, the repair
loop's call-count guard, a model answer without a script.

One wording and one code per refusal, whoever refuses: ``revise check`` and
``revise gate``, a run or a job the dispatcher refuses (stored with its revision),
and each refused repair round. Each error's fields are what a program reads:
the violations' rule ids, the gate's counterexamples, the dropped calls.
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.errors import CallsDropped, CheckFailed, GateRejected, NoScript
from orchestrator.checker import Violation
from orchestrator.gate import Counterexample


def check_failed(violations: Iterable[Violation]) -> CheckFailed:
    """For a script with at least one violation of severity error (warnings are left out)."""
    errors = [v for v in violations if v.severity == "error"]
    rules = ", ".join(sorted({v.rule for v in errors}))
    return CheckFailed(f"the checker rejected the script ({len(errors)} violation(s) of "
                       f"{rules}); fix them and submit again",
                       rules=[v.rule for v in errors], lines=[v.line for v in errors])


def gate_rejected(counterexamples: Iterable[Counterexample]) -> GateRejected:
    found = list(counterexamples)
    return GateRejected("the gate stopped the candidate before any container started: "
                        + "; ".join(c.describe() for c in found),
                        counterexamples=[c.to_json() for c in found])


def calls_dropped(calls: int, required: int, dropped_lines: Iterable[int]) -> CallsDropped:
    lines = sorted(dropped_lines)
    where = f" (lines {', '.join(map(str, lines))} of the failed script)" if lines else ""
    return CallsDropped(f"the candidate has {calls} capability call expression(s) where the "
                        f"failed script has {required}{where}; keep every call the run "
                        "still needs", calls=calls, required_calls=required,
                        dropped_lines=lines)


def no_script() -> NoScript:
    return NoScript("the model's answer holds no script; answer with the whole repaired "
                    "script in one ```python block")

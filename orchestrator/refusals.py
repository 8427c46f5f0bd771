"""The typed error of each refusal before anything runs: the checker, the gate, the repair
loop's call-count guard, a model answer without a script.

One wording and one code per refusal, whoever refuses: ``revise check`` and
``revise gate``, a run or a job the dispatcher refuses (stored with its revision),
and each refused repair round. Each error's fields are what a program reads:
the violations' rule ids, the gate's counterexamples, the dropped calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from broker.errors import CallsDropped, CheckFailed, GateRejected, NoScript
from orchestrator.checker import Violation
from orchestrator.gate import Counterexample

if TYPE_CHECKING:
    from orchestrator.repair_context import CallShortfall


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


def calls_dropped(calls: int, required: int, dropped_lines: Iterable[int], *,
                  counted: str = "call expressions",
                  short: Sequence[CallShortfall] = ()) -> CallsDropped:
    """``counted`` "calls": ``calls`` and ``required`` are how many capability calls the
    candidate and the failed script can make at most, ``short`` the capabilities the
    candidate has fewer of; "call expressions": their call expressions, and
    ``dropped_lines`` the failed script's that the candidate lacks."""
    lines = sorted(dropped_lines)
    if counted == "calls":
        each = [f"{_at_most(s.calls)} {s.capability} {_calls(s.calls)} where the failed "
                f"script can make {s.required}{failed_lines(s.lines)}"
                for s in short]
        what = "; ".join(each) or (f"{_at_most(calls)} capability {_calls(calls)} where the "
                                   f"failed script can make {required}")
        return CallsDropped(f"the candidate {what}; keep the work of every call the "
                            "run still needs (a loop makes one call per element)",
                            calls=calls, required_calls=required, dropped_lines=lines,
                            counted=counted, short=[s.to_json() for s in short])
    return CallsDropped(f"the candidate has {calls} capability call expression(s) where the "
                        f"failed script has {required}{failed_lines(lines)}; keep every call the "
                        "run still needs", calls=calls, required_calls=required,
                        dropped_lines=lines, counted=counted)


def _at_most(n: int) -> str:
    return f"can make at most {n}" if n else "makes no"


def _calls(n: int) -> str:
    return "call" if n == 1 else "calls"


def failed_lines(lines: Sequence[int]) -> str:
    """" (lines 3, 4 of the failed script)", or "" for none."""
    if not lines:
        return ""
    return (f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))} "
            "of the failed script)")


def no_script() -> NoScript:
    return NoScript("the model's answer holds no script; answer with the whole repaired "
                    "script in one ```python block")

"""Every repair shape of the corpus, embedded on the process sandbox, on one run id each.

For each step: the provider-log count it added (paid executions), its status and
error type, the call counts, the gate's verdict, and the generic properties (no
silent duplicate, no wrong reuse, no slot served twice, no phantom repeat). A
shape whose ``xfail`` is set shows a defect of the core: its test states the
contract and fails, strictly, until the core is fixed.

The last test is the corpus-wide summary: 0 silent duplicate paid calls and 0
wrong reuse across every shape (the defective ones included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from broker.envelope import Envelope

from ..conftest import Harness
from .corpus import SHAPES, Shape
from .runner import StepResult, invariant_violations, mismatches, run_shape, spying

# Every step's observation, by shape, as the tests ran it (the summary fills the gaps).
OBSERVED: dict[str, list[StepResult]] = {}


def _params(shapes: list[Shape]) -> list[Any]:
    return [pytest.param(s, id=s.name, marks=[pytest.mark.xfail(strict=True, reason=s.xfail)]
                         if s.xfail else []) for s in shapes]


def observe(make_harness: Callable[..., Harness], shape: Shape, *, rerun: bool = False
            ) -> list[StepResult]:
    """Run ``shape`` (and, with ``rerun``, its last step once more) on a fresh harness."""
    harness = make_harness(latency=shape.delay, **shape.settings)

    def submit(run_id: str, script: str, args: Any, envelope: Envelope) -> dict[str, Any]:
        return harness.pipeline.run(run_id, script, args, envelope).to_json()

    steps = shape.steps + ((shape.steps[-1],) if rerun else ())
    with spying() as spy:
        return run_shape(shape, submit, harness.provider_log, "run-1", spy,
                         steps=steps)


def _explain(shape: Shape, results: list[StepResult]) -> str:
    lines = []
    for number, result in enumerate(results, start=1):
        problems = mismatches(result)
        if problems:
            error = (result.report.get("error") or {}).get("message", "")
            lines.append(f"{shape.name} v{number}: " + "; ".join(problems)
                         + (f" [{error[:300]}]" if error else ""))
    return "\n".join(lines)


def test_the_corpus_is_large_and_covers_every_family() -> None:
    assert len(SHAPES) >= 40
    families = {s.family for s in SHAPES}
    assert families >= {"parallelise", "dag", "insert", "reorder", "wrap", "loops", "payload",
                        "race", "wrong_reuse"}
    for shape in SHAPES:
        assert shape.steps[0].status != "succeeded", f"{shape.name}: v1 must fail partway"
        assert shape.steps[0].paid > 0 or shape.xfail, f"{shape.name}: v1 commits nothing"


@pytest.mark.parametrize("shape", _params(SHAPES))
def test_repair_shape(make_harness: Callable[..., Harness], shape: Shape) -> None:
    results = observe(make_harness, shape)
    OBSERVED[shape.name] = results
    assert not _explain(shape, results), _explain(shape, results)


RERUNNABLE = [s for s in SHAPES if s.steps[-1].status == "succeeded" and not s.xfail]


@pytest.mark.parametrize("shape", _params(RERUNNABLE))
def test_rerunning_the_repair_replays_everything(make_harness: Callable[..., Harness],
                                                shape: Shape) -> None:
    """v3 = the repaired script again: everything it did is committed, so it replays
    (only a rejected call it catches is paid again: failures are never committed)."""
    results = observe(make_harness, shape, rerun=True)
    repair, rerun = results[-2], results[-1]
    assert rerun.report["status"] == "succeeded", rerun.report["error"]
    assert rerun.paid == shape.rerun_paid
    assert rerun.report["result"] == repair.report["result"]
    assert rerun.report["calls"]["replayed"] == (
        repair.report["calls"]["replayed"] + repair.report["calls"]["succeeded"])
    assert invariant_violations(rerun) == []


def test_corpus_summary_no_silent_duplicate_and_no_wrong_reuse(
        make_harness: Callable[..., Harness]) -> None:
    """Across the whole corpus (shapes the run above skipped are run here)."""
    for shape in SHAPES:
        if shape.name not in OBSERVED:
            OBSERVED[shape.name] = observe(make_harness, shape)
    steps = [r for shape in SHAPES for r in OBSERVED[shape.name]]
    silent = sum(r.silent_duplicates for r in steps)
    wrong = [f"{s.call} <- {s.slot}: {s.problem}" for r in steps for s in r.wrong_reuse]
    assert len(steps) >= 2 * len(SHAPES) >= 80
    assert silent == 0
    assert wrong == []
    # A candidate the gate refused never reached a sandbox, so it never spent.
    for result in steps:
        if result.report["gate"]["counterexamples"]:
            assert result.paid == 0

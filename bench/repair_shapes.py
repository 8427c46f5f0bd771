"""Paid calls per repair shape: the corpus of tests/scenarios/repairs, embedded.

Run: python bench/repair_shapes.py [--only SUBSTRING] [--keep]

For every shape of the corpus (v1 fails partway, v2 is the model's repair, on one
run id), in a temporary REVISE_HOME on the process sandbox: the provider
executions v1 and v2 added (from the provider log: rejected attempts count),
v2's outcome, and what a plain rerun of the repaired script would pay on an empty
store (v2 alone on a fresh run id). Shapes with a third step show it too. A
shape marked ``x`` is one on which the core is known to be wrong (a strict xfail
in the tests). Prints only; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from broker.envelope import Envelope  # noqa: E402
from broker.settings import SandboxKind, Settings  # noqa: E402
from orchestrator.embedded import open_services  # noqa: E402
from sandbox.runner import ProcessRunner  # noqa: E402
from tests.scenarios.repairs.corpus import SHAPES, Shape  # noqa: E402
from tests.scenarios.repairs.runner import (  # noqa: E402
    StepResult,
    read_provider_log,
    run_shape,
)


def measure(shape: Shape, home: Path) -> dict[str, Any]:
    settings = Settings(home=home, sandbox=SandboxKind.PROCESS, **shape.settings)
    services = open_services(settings, runner=ProcessRunner(), latency=shape.delay)
    try:
        pipeline = services.pipeline()

        def submit(run_id: str, script: str, args: Any, envelope: Envelope) -> dict[str, Any]:
            return pipeline.run(run_id, script, args, envelope).to_json()

        def log() -> list[dict[str, Any]]:
            return read_provider_log(settings.provider_log_path)

        steps: list[StepResult] = run_shape(shape, submit, log, "run-1")
        fresh = run_shape(shape, submit, log, "fresh-1", steps=(shape.steps[1],))[0]
    finally:
        services.close()
    return {"shape": shape, "steps": steps, "fresh": fresh}


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) if i == 0 or i == len(cells) - 1 else c.rjust(w)
                     for i, (c, w) in enumerate(zip(cells, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the shapes whose name contains this")
    parser.add_argument("--keep", action="store_true", help="keep the temporary REVISE_HOME")
    options = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="revise-shapes-"))
    shapes = [s for s in SHAPES if options.only in s.name]
    header = ["shape", "v1", "v2", "v3", "rerun", "v2 outcome"]
    widths = [max(len(s.name) for s in shapes) + 2, 3, 3, 3, 5, 30]
    print(f"{len(shapes)} repair shapes, embedded (process sandbox), REVISE_HOME={root}")
    print("paid = provider executions from the provider log; rerun = the repaired script "
          "alone on an empty store\n")
    print(_row(header, widths))
    print(_row(["-" * w for w in widths], widths))
    totals = {"v1": 0, "v2": 0, "v3": 0, "rerun": 0, "ok": 0, "ok_ours": 0, "ok_rerun": 0}
    outcomes: dict[str, int] = {}
    silent = wrong = 0
    try:
        for index, shape in enumerate(shapes):
            measured = measure(shape, root / f"s{index}")
            steps, fresh = measured["steps"], measured["fresh"]
            v1, v2 = steps[0], steps[1]
            v3 = steps[2] if len(steps) > 2 else None
            totals["v1"] += v1.paid
            totals["v2"] += v2.paid
            totals["rerun"] += fresh.paid
            if v3 is not None:
                totals["v3"] += v3.paid
            outcomes[v2.report["status"]] = outcomes.get(v2.report["status"], 0) + 1
            if v2.report["status"] == "succeeded":
                totals["ok"] += 1
                totals["ok_ours"] += v2.paid
                totals["ok_rerun"] += fresh.paid
            silent += sum(s.silent_duplicates for s in steps)
            wrong += sum(len(s.wrong_reuse) for s in steps)
            name = shape.name + (" x" if shape.xfail else "")
            print(_row([name, str(v1.paid), str(v2.paid), "-" if v3 is None else str(v3.paid),
                        str(fresh.paid), v2.outcome()], widths), flush=True)
    finally:
        if not options.keep:
            shutil.rmtree(root, ignore_errors=True)

    print(_row(["-" * w for w in widths], widths))
    print(_row(["total", str(totals["v1"]), str(totals["v2"]), str(totals["v3"]),
                str(totals["rerun"]), ""], widths))
    ours, rerun = totals["v2"], totals["rerun"]
    print(f"\nrepairs (v2), all shapes: ours {ours} paid calls vs plain rerun {rerun} "
          f"({rerun - ours} fewer, {100 * (rerun - ours) / max(rerun, 1):.0f}%)")
    ok, ok_ours, ok_rerun = totals["ok"], totals["ok_ours"], totals["ok_rerun"]
    print(f"repairs that succeeded ({ok}): ours {ok_ours} vs plain rerun {ok_rerun} "
          f"({ok_rerun - ok_ours} fewer, {100 * (ok_rerun - ok_ours) / max(ok_rerun, 1):.0f}%)")
    print("v2 outcomes: " + ", ".join(f"{n} {k}" for k, n in sorted(outcomes.items())))
    print(f"silent duplicate paid calls: {silent}; wrong reuse: {wrong}; "
          f"shapes with a known core defect (x): {sum(1 for s in shapes if s.xfail)}")
    print("(a stopped v2 pays only for what it ran before the stop; the rerun column is "
          "what the same script buys from scratch, where nothing stops it)")


if __name__ == "__main__":
    main()

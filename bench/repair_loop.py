"""Repair-loop benchmark (issue 7): rewrites per successful repair, gate interception rate.

Run: python bench/repair_loop.py [--max-attempts 3] [--no-execute] [--case NAME] [--json]

Each case in bench/repair_corpus/ holds a failing script (``failing.script``),
its args (``case.json``) and the model's recorded candidates (``model.jsonl``).
For each case: the script runs once on the embedded pipeline (process sandbox,
temporary home) and must fail; the repair loop then replays the recorded
candidates; the accepted candidate, if any, is executed on the same run id
(unless --no-execute). Prints one row per case and the totals; nothing is
asserted: this is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from orchestrator.models import RecordedBackend
from orchestrator.repair import RepairResult, repair_dynamic_source
from sandbox.runner import ProcessRunner

CORPUS = Path(__file__).resolve().parent / "repair_corpus"


@dataclass
class CaseRow:
    name: str
    category: str
    first_status: str = ""
    first_executed: int = 0
    result: RepairResult | None = None
    run: dict[str, Any] | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def stages(self) -> list[str]:
        return [a.stage for a in self.result.attempts] if self.result else []

    def to_json(self) -> dict[str, Any]:
        run = self.run or {}
        return {"case": self.name, "category": self.category, "first_run": self.first_status,
                "accepted": bool(self.result and self.result.accepted),
                "rewrites": self.result.rewrites if self.result else 0,
                "stages": self.stages, "run_status": run.get("status"),
                "replayed": (run.get("calls") or {}).get("replayed"),
                "executed": (run.get("calls") or {}).get("executed"),
                "error": (run.get("error") or {}).get("type"), "seconds": self.seconds,
                "notes": self.notes}


def run_case(directory: Path, home: Path, *, max_attempts: int, execute: bool) -> CaseRow:
    meta = json.loads((directory / "case.json").read_text(encoding="utf-8"))
    row = CaseRow(directory.name, meta.get("category", "?"))
    args = meta.get("args", {})
    started = time.perf_counter()
    services = open_services(Settings(home=home, sandbox=SandboxKind.PROCESS),
                             runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        run_id = directory.name
        first = pipeline.run(run_id, (directory / "failing.script").read_text(), args,
                             Envelope())
        row.first_status = first["status"]
        row.first_executed = first["calls"]["executed"]
        if first["status"] == "succeeded":
            row.notes.append("the failing script succeeded: the case is broken")
            return row
        model = RecordedBackend.load(directory / "model.jsonl")
        attempts = min(max_attempts, model.remaining("repair"))
        row.result = repair_dynamic_source(store=services.store, run_id=run_id, model=model,
                                           max_attempts=max(attempts, 1), args=args)
        if execute and row.result.candidate is not None:
            row.run = pipeline.run(run_id, row.result.candidate, args, Envelope())
    finally:
        services.close()
        row.seconds = round(time.perf_counter() - started, 2)
    return row


def summarize(rows: list[CaseRow]) -> dict[str, Any]:
    results = [r.result for r in rows if r.result is not None]
    attempts = [a for result in results for a in result.attempts]
    rewrites = [result.rewrites for result in results if result.accepted]
    refused_by = Counter(stage for a in attempts for stage in a.refused_by)
    runs = [r.run for r in rows if r.run is not None]
    total = len(attempts) or 1
    return {
        "cases": len(rows),
        "candidates": len(attempts),
        "successful_repairs": len(rewrites),
        "rewrites_per_successful_repair":
            round(sum(rewrites) / len(rewrites), 2) if rewrites else None,
        "first_attempt_accepted": rewrites.count(1),
        "gate_interception_rate": round(refused_by["gate"] / total, 3),
        "checker_interception_rate": round(refused_by["check"] / total, 3),
        "call_count_interception_rate": round(refused_by["call_count"] / total, 3),
        "refused_by": dict(refused_by),
        "first_refusing_stage": dict(Counter(a.stage for a in attempts)),
        "executed_runs": len(runs),
        "executed_succeeded": sum(1 for run in runs if run["status"] == "succeeded"),
        "replayed_calls": sum(run["calls"]["replayed"] for run in runs),
        "executed_calls": sum(run["calls"]["executed"] for run in runs),
    }


def _print_rows(rows: list[CaseRow]) -> None:
    header = (f"{'case':<24} {'category':<28} {'first':<7} {'ok':<3} {'rw':>2}  "
              f"{'stages':<34} {'run':<28} {'repl':>4} {'exec':>4}")
    print(header)
    print("-" * len(header))
    for row in rows:
        data = row.to_json()
        run = data["run_status"] or "-"
        if data["error"]:
            run = f"{run}:{data['error']}"[:28]
        print(f"{row.name:<24} {row.category:<28} {row.first_status:<7} "
              f"{'yes' if data['accepted'] else 'no':<3} {data['rewrites']:>2}  "
              f"{' > '.join(data['stages']):<34} {run:<28} "
              f"{data['replayed'] if data['replayed'] is not None else '-':>4} "
              f"{data['executed'] if data['executed'] is not None else '-':>4}")
        for note in row.notes:
            print(f"    note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-attempts", type=int, default=3)
    parser.add_argument("--no-execute", action="store_true",
                        help="stop after the loop; do not run accepted candidates")
    parser.add_argument("--case", action="append", help="only these case names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    options = parser.parse_args(argv)
    cases = sorted(p for p in CORPUS.iterdir() if (p / "case.json").exists())
    if options.case:
        cases = [c for c in cases if c.name in set(options.case)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="revise-repair-bench-") as tmp:
        for directory in cases:
            rows.append(run_case(directory, Path(tmp) / directory.name,
                                 max_attempts=options.max_attempts,
                                 execute=not options.no_execute))
    summary = summarize(rows)
    if options.json:
        print(json.dumps({"summary": summary, "cases": [r.to_json() for r in rows]}, indent=2))
        return 0
    _print_rows(rows)
    print()
    print("interception rates are refused candidates / all candidates, per stage (a candidate "
          "can be refused by several)")
    for key, value in summary.items():
        print(f"{key:<32} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

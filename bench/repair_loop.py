"""Repair-loop benchmark: rounds per successful repair and spend per episode, with runtime
feedback on and off.

Run: python bench/repair_loop.py [--max-attempts 3] [--no-execute] [--case NAME] [--json]
                                  [--relocation remap|stop]

Each case in bench/repair_corpus/ holds a failing script (``failing.script``), its args
(``case.json``) and the model's recorded answers (``model.jsonl``). An *episode* is one
case in one mode, on a fresh temporary home (embedded pipeline, process sandbox): the
failing script runs once and must fail; the repair loop then replays the recorded
answers and runs every admissible candidate on the same run id.

* runtime feedback **on** (``revise repair --execute``): a candidate the runtime stops
  (divergence, ledger denial, orphan stop, budget) goes back to the model as the next
  round, within the same budget of rounds;
* runtime feedback **off** (the loop before this mode existed): the first executed
  candidate ends the episode, whatever its run did.

Spend is the sum of unit prices of the provider attempts that may have been charged (the
run report's ``spend``; a refusal the provider makes free costs nothing): the
first run's, and each round's (0 for a refused candidate). With ``--no-execute`` the
loop stops at the first admissible candidate and nothing more runs. Prints one row per
episode and the totals per mode; nothing is asserted: a benchmark, not a test.
``--relocation stop`` runs the gate and the runtime without relocation (the paper's
strict rule, the behaviour before the remap): compare rounds per success of the two.
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
MODES = {"on": True, "off": False}


@dataclass
class Episode:
    name: str
    category: str
    mode: str  # on | off | static (--no-execute)
    first_status: str = ""
    first_spend: float = 0.0
    result: RepairResult | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def succeeded(self) -> bool:
        return self.result is not None and self.result.outcome in ("succeeded", "accepted")

    @property
    def repair_spend(self) -> float:
        return self.result.spend if self.result else 0.0

    @property
    def spend(self) -> float:
        return round(self.first_spend + self.repair_spend, 6)

    def to_json(self) -> dict[str, Any]:
        result = self.result
        run = (result.run if result else None) or {}
        return {"case": self.name, "category": self.category, "mode": self.mode,
                "first_run": self.first_status, "first_spend": self.first_spend,
                "outcome": result.outcome if result else "broken",
                "rounds": result.rewrites if result else 0,
                "stages": [a.stage for a in result.attempts] if result else [],
                "round_spend": [a.spend for a in result.attempts] if result else [],
                "repair_spend": self.repair_spend, "spend": self.spend,
                "run_status": run.get("status"),
                "replayed": (run.get("calls") or {}).get("replayed"),
                "executed": (run.get("calls") or {}).get("executed"),
                "error": (run.get("error") or {}).get("type"), "seconds": self.seconds,
                "notes": self.notes}


def run_episode(directory: Path, home: Path, *, mode: str, max_attempts: int,
                relocation: str = "remap") -> Episode:
    meta = json.loads((directory / "case.json").read_text(encoding="utf-8"))
    episode = Episode(directory.name, meta.get("category", "?"), mode)
    args = meta.get("args", {})
    started = time.perf_counter()
    services = open_services(Settings(home=home, sandbox=SandboxKind.PROCESS,
                                      relocation=relocation), runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        run_id = directory.name
        first = pipeline.run(run_id, (directory / "failing.script").read_text(), args,
                             Envelope()).to_json()
        episode.first_status, episode.first_spend = first["status"], first["spend"]
        if first["status"] == "succeeded":
            episode.notes.append("the failing script succeeded: the case is broken")
            return episode
        model = RecordedBackend.load(directory / "model.jsonl")
        rounds = max(min(max_attempts, model.remaining("repair")), 1)

        def execute(text: str) -> dict[str, Any]:
            return pipeline.run(run_id, text, args, Envelope()).to_json()

        episode.result = repair_dynamic_source(
            store=services.store, run_id=run_id, model=model, max_attempts=rounds,
            relocation=relocation, execute=None if mode == "static" else execute,
            runtime_feedback=MODES.get(mode, False))
    finally:
        services.close()
        episode.seconds = round(time.perf_counter() - started, 2)
    return episode


def summarize(episodes: list[Episode]) -> dict[str, Any]:
    results = [e.result for e in episodes if e.result is not None]
    attempts = [a for result in results for a in result.attempts]
    wins = [e for e in episodes if e.succeeded]
    rounds = [e.result.rewrites for e in wins if e.result is not None]
    stages = Counter(a.stage for a in attempts)
    total = len(attempts) or 1
    count = len(episodes) or 1
    return {
        "episodes": len(episodes),
        "successes": len(wins),
        "rounds": len(attempts),
        "rounds_per_success": round(sum(rounds) / len(rounds), 2) if rounds else None,
        "spend_per_episode": round(sum(e.spend for e in episodes) / count, 4),
        "repair_spend_per_episode": round(sum(e.repair_spend for e in episodes) / count, 4),
        "spend_per_success": round(sum(e.spend for e in episodes) / len(wins), 4)
        if wins else None,
        "runtime_refusals": stages["runtime"],
        "gate_interception_rate": round(
            sum(1 for a in attempts if "gate" in a.refused_by) / total, 3),
        "checker_interception_rate": round(
            sum(1 for a in attempts if "check" in a.refused_by) / total, 3),
        "call_count_interception_rate": round(
            sum(1 for a in attempts if "call_count" in a.refused_by) / total, 3),
        "round_ends": dict(stages),
    }


def _print_rows(episodes: list[Episode]) -> None:
    header = (f"{'case':<24} {'mode':<6} {'outcome':<15} {'rnd':>3}  {'stages':<40} "
              f"{'spend':>7} {'repl':>4} {'exec':>4}")
    print(header)
    print("-" * len(header))
    for episode in episodes:
        data = episode.to_json()
        print(f"{episode.name:<24} {episode.mode:<6} {data['outcome']:<15} "
              f"{data['rounds']:>3}  {' > '.join(data['stages']):<40} "
              f"{data['spend']:>7.3f} "
              f"{data['replayed'] if data['replayed'] is not None else '-':>4} "
              f"{data['executed'] if data['executed'] is not None else '-':>4}")
        for note in episode.notes:
            print(f"    note: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-attempts", type=int, default=3, help="rounds per episode")
    parser.add_argument("--no-execute", action="store_true",
                        help="stop at the first admissible candidate; run nothing more")
    parser.add_argument("--case", action="append", help="only these case names")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--relocation", choices=["remap", "stop"], default="remap",
                        help="the gate's relocation rule (stop: the paper's strict gate)")
    options = parser.parse_args(argv)
    cases = sorted(p for p in CORPUS.iterdir() if (p / "case.json").exists())
    if options.case:
        cases = [c for c in cases if c.name in set(options.case)]
    modes = ["static"] if options.no_execute else list(MODES)
    episodes: dict[str, list[Episode]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="revise-repair-bench-") as tmp:
        for directory in cases:
            for mode in modes:
                episodes[mode].append(run_episode(
                    directory, Path(tmp) / f"{directory.name}-{mode}", mode=mode,
                    max_attempts=options.max_attempts, relocation=options.relocation))
    summary = {f"runtime_feedback_{m}" if m in MODES else m: summarize(e)
               for m, e in episodes.items()}
    if options.json:
        print(json.dumps({"summary": summary,
                          "episodes": [e.to_json() for m in modes for e in episodes[m]]},
                         indent=2))
        return 0
    _print_rows([e for pair in zip(*episodes.values(), strict=True) for e in pair])
    print()
    keys = list(next(iter(summary.values())))
    print(f"{'':<32} " + " ".join(f"{name:>22}" for name in summary))
    for key in keys:
        print(f"{key:<32} " + " ".join(f"{s[key]!s:>22}" for s in summary.values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

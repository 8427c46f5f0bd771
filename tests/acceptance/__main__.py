"""``python -m tests.acceptance``: run the checks and print a pass/fail table."""

from __future__ import annotations

import argparse
import sys
import time

from tests.acceptance import __doc__ as USAGE
from tests.acceptance.attacks import run_attack_checks
from tests.acceptance.pipeline import run_pipeline_checks
from tests.acceptance.probes import Result, run_isolation_checks


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    parser = argparse.ArgumentParser(prog="python -m tests.acceptance",
                                     description=(USAGE or "").split("\n\n")[0])
    parser.add_argument("--runner", choices=("docker", "process", "all"), default="docker")
    parser.add_argument("--only", help="run the checks whose name contains this")
    parser.add_argument("--pipeline", action="store_true",
                        help="also the end-to-end RPC checks through the pipeline")
    parser.add_argument("--attacks", action="store_true",
                        help="also attacks from the corpus, judged from the host")
    args = parser.parse_args(argv)
    kinds = ("docker", "process") if args.runner == "all" else (args.runner,)
    started = time.monotonic()
    results: list[Result] = []
    for kind in kinds:
        try:
            results += run_isolation_checks(kind, only=args.only)
        except Exception as exc:  # the runner itself cannot start: every check fails
            results.append((f"{kind}: runner available", False, f"{exc}"[:200]))
        if args.pipeline:
            results += run_pipeline_checks(kind, only=args.only)
        if args.attacks:
            try:
                results += run_attack_checks(kind, only=args.only)
            except Exception as exc:  # the services cannot even open: every check fails
                results.append((f"{kind} attack: services available", False, f"{exc}"[:200]))
    table = Table("check", "result", "detail", title=f"{time.monotonic() - started:.1f}s")
    for name, ok, detail in results:
        table.add_row(name, "[green]pass[/]" if ok else "[red]FAIL[/]", detail)
    Console().print(table)
    failed = [name for name, ok, _ in results if not ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

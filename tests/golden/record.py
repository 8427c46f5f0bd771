"""Record the golden runs: ``python -m tests.golden.record`` (from a checkout).

Each is a real embedded run (the local provider, the process sandbox, a SQLite store in
a temporary home), written to ``tests/fixtures/golden/NAME.json`` with the rows the store
holds and what the certificate and the report computed from them then. Run it again only
when a change to the store, the certificate or the report is meant to change them, and
say why in the commit.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.demo.run import run_demo
from orchestrator.embedded import Services, open_services
from tests.golden.records import dump_run, write

SCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "scripts"
SHOTS = {"shots": ["dawn", "noon", "dusk", "night"]}


def _script(name: str) -> str:
    return (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")


def fanout(services: Services) -> str:
    """Four images in one parallel wave, all paid and committed."""
    services.pipeline().run("golden-fanout", _script("fanout_repaired"), SHOTS, Envelope())
    return "golden-fanout"


def failed(services: Services) -> str:
    """A fanout whose fourth call the provider rejects: three committed, one failed."""
    services.pipeline().run("golden-failed", _script("fanout_v1"), SHOTS, Envelope())
    return "golden-failed"


def race(services: Services) -> str:
    """A race, then the same script again: the winner replays, the losers are orphans."""
    for _ in range(2):
        services.pipeline().run("golden-race", _script("race_v1"), {}, Envelope())
    return "golden-race"


def repair(services: Services) -> str:
    """`revise demo`: a failed fanout, a candidate the gate refuses, and a relocated repair
    that replays the three committed shots and pays for one."""
    summary = run_demo(services, None)
    if not summary["ok"]:
        raise SystemExit(f"the demo did not go as told: {summary}")
    return str(summary["run_id"])


RUNS: dict[str, Callable[[Services], str]] = {
    "fanout": fanout, "failed": failed, "race": race, "repair": repair}


def record(names: list[str]) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix="revise-golden-") as tmp:
        settings = Settings(home=Path(tmp) / "home", database_url=None,
                            sandbox=SandboxKind.PROCESS)
        services = open_services(settings)
        try:
            for name in names:
                run = RUNS[name]
                run_id = run(services)
                written.append(write(dump_run(services.store, run_id, name,
                                              (run.__doc__ or "").strip())))
        finally:
            services.close()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.golden.record",
                                     description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"the runs to record (default: all of {', '.join(RUNS)})")
    names = parser.parse_args(argv).names or list(RUNS)
    unknown = sorted(set(names) - set(RUNS))
    if unknown:
        parser.error(f"no golden run {', '.join(unknown)}; pick from {', '.join(RUNS)}")
    for path in record(names):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

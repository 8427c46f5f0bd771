"""``bench/peers.py --slow``: jobs that wait on a slow provider, Revise beside Temporal
and DBOS in one run (issue 26).

One provider process (``slow_provider.py``, every request answered after L seconds)
serves every system; each (N, system) runs in a fresh process (``slow_jobs.py``),
so one system's threads and memory never weigh on another's figure. For each:
makespan / ideal (ideal = K x L: all jobs at once, each call back to back), the most
requests the provider worked on at once, what it charged (expected N x K) and how
many of those were duplicates, and the system's peak PSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from .memory import megabytes

HERE = Path(__file__).resolve().parent


class SlowProvider:
    def __init__(self, latency: float) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="revise-slow-provider-")
        port_file = Path(self._dir.name) / "port"
        self._proc = subprocess.Popen([sys.executable, str(HERE / "slow_provider.py"),
                                       "--latency", str(latency), "--port-file",
                                       str(port_file)])
        deadline = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text():
            if time.monotonic() > deadline or self._proc.poll() is not None:
                raise RuntimeError("the slow provider did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port_file.read_text()}"

    def reset(self) -> None:
        httpx.post(f"{self.url}/reset", timeout=10).raise_for_status()

    def stats(self) -> dict[str, int]:
        return dict(httpx.get(f"{self.url}/stats", timeout=10).json())

    def close(self) -> None:
        self._proc.terminate()
        self._proc.wait(10)
        self._dir.cleanup()


def run_one(system: str, jobs: int, calls: int, provider: SlowProvider) -> dict[str, Any]:
    provider.reset()
    done = subprocess.run([sys.executable, str(HERE / "slow_jobs.py"), "--system", system,
                           "--jobs", str(jobs), "--calls", str(calls), "--provider",
                           f"{provider.url}/v1"], capture_output=True, text=True,
                          timeout=7200)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1][:200]}
    return json.loads(done.stdout.strip().splitlines()[-1]) | provider.stats()


def main(jobs: list[int], systems: list[str], calls: int, latency: float) -> None:
    print(f"{len(jobs)} workloads: N jobs x {calls} sequential image calls, each answered "
          f"after {latency:g} s (ideal makespan {calls * latency:g} s); "
          f"{time.strftime('%Y-%m-%d')}")
    print("| N | system | makespan / ideal | peak requests at the provider | charged / "
          "expected | duplicates | idle PSS | peak PSS |")
    print("|---|---|---|---|---|---|---|---|")
    provider = SlowProvider(latency)
    try:
        for n in jobs:
            for system in systems:
                got = run_one(system, n, calls, provider)
                if "error" in got:
                    print(f"| {n} | {system} | failed: {got['error']} | | | | | |", flush=True)
                    continue
                print(f"| {n} | {system} | {got['makespan'] / (calls * latency):.1f}x | "
                      f"{got['peak']} | {got['charged']} / {n * calls} | {got['duplicates']} "
                      f"| {megabytes(int(got['idle_pss']))} | "
                      f"{megabytes(int(got['peak_pss']))} |", flush=True)
    finally:
        provider.close()

"""Core benchmarks (issue 2): checker, gate, certificate, replay versus execute.

Run: python bench/core.py [--samples N]
Prints figures and ratios side by side; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
import time
from pathlib import Path

from peers.tools import CORPUS, checker_samples  # bench/ is on the path of a bench

from broker.envelope import Envelope
from broker.identity import Identity
from broker.records import SlotRecord
from broker.settings import SandboxKind, Settings
from broker.sqlstore import SqlStore
from orchestrator.certificate import build_certificate, verify
from orchestrator.embedded import open_services
from orchestrator.gate import check_gate, frozen_sites
from orchestrator.sites import assign_sites
from sandbox.runner import ProcessRunner


def _timed(fn, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_checker(samples: int) -> None:
    checker, parse = checker_samples(samples)
    print(f"checker over {len(CORPUS)} scripts x {samples}: p50 {_pct(checker, .5):.3f} ms, "
          f"p95 {_pct(checker, .95):.3f} ms; ast.parse p50 {_pct(parse, .5):.3f} ms; "
          f"ratio p50 {_pct(checker, .5) / _pct(parse, .5):.1f}x")


def _script_with(n: int) -> str:
    calls = "\n".join(f'    r{i} = await ctx.run("text.generate", {{"prompt": "p{i}"}})'
                      for i in range(n))
    return f"async def orchestrate(ctx, args):\n{calls}\n    return 1\n"


def _slots(n: int) -> list[SlotRecord]:
    sites = assign_sites(ast.parse(_script_with(n)))
    return [SlotRecord("bench", Identity(s.site, (), 0), s.capability, f"d{i}", s.fingerprint,
                       {"text": f"t{i}"}, revision=1) for i, s in enumerate(sites)]


def bench_gate(samples: int) -> None:
    for n in (1, 10, 50, 200):
        slots = _slots(n)
        candidate = assign_sites(ast.parse(_script_with(n)))
        frozen = frozen_sites(slots)
        times = _timed(lambda f=frozen, c=candidate: check_gate(f, c), samples)
        full = _timed(lambda s=slots, c=candidate: check_gate(frozen_sites(s), c), samples)
        print(f"gate at {n:>3} frozen sites: p50 {_pct(times, .5):.4f} ms "
              f"(with prefix load from records {_pct(full, .5):.4f} ms)")


def bench_certificate(samples: int) -> None:
    slots = _slots(200)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqlStore.open(f"sqlite:///{tmp}/bench.db")
        pure = _timed(lambda: build_certificate(slots), samples)
        cert = build_certificate(slots)

        def persist_and_verify() -> None:
            store.save_certificate("bench", 1, cert.digest, list(cert.entries))
            saved = store.latest_certificate("bench")
            verify(saved.digest, saved.entries, slots)

        stored = _timed(persist_and_verify, max(5, samples // 4))
        store.close()
    print(f"certificate at 200 sites: build {_pct(pure, .5):.3f} ms; persist + verify "
          f"(SQLite) p50 {_pct(stored, .5):.3f} ms")


def bench_replay(calls: int) -> None:
    body = "\n".join(
        f'    r{i} = await ctx.run("text.generate", {{"prompt": "bench {i}"}})'
        for i in range(calls))
    text = f"async def orchestrate(ctx, args):\n{body}\n    return 1\n"
    empty = "async def orchestrate(ctx, args):\n    return 1\n"
    with tempfile.TemporaryDirectory() as tmp:
        services = open_services(Settings(home=Path(tmp), sandbox=SandboxKind.PROCESS),
                                 runner=ProcessRunner())
        pipeline = services.pipeline()
        base = min(_run_seconds(pipeline, f"empty{i}", empty) for i in range(3))
        execute = _run_seconds(pipeline, "bench", text)
        replay = min(_run_seconds(pipeline, "bench", text) for _ in range(3))
        services.close()
    per_exec = (execute - base) / calls * 1000
    per_replay = (replay - base) / calls * 1000
    print(f"embedded per-call cost over {calls} sequential calls (local provider, zero "
          f"latency): executed {per_exec:.3f} ms, replay hit {per_replay:.3f} ms, ratio "
          f"execute/replay {per_exec / per_replay:.2f}x; empty-run overhead {base * 1000:.1f} ms")


def _run_seconds(pipeline, run_id: str, text: str) -> float:
    start = time.perf_counter()
    report = pipeline.run(run_id, text, {}, Envelope())
    elapsed = time.perf_counter() - start
    if report.status != "succeeded":
        sys.exit(f"benchmark run failed: {report.error}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--calls", type=int, default=200)
    opts = parser.parse_args()
    bench_checker(opts.samples)
    bench_gate(opts.samples * 4)
    bench_certificate(opts.samples)
    bench_replay(opts.calls)


if __name__ == "__main__":
    main()

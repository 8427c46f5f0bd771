"""Sandbox benchmarks (issue 3): sandbox start, RPC round trip, whole-job overhead.

Run: python bench/sandbox_overhead.py [--jobs N] [--calls N]
     python bench/sandbox_overhead.py --startup [--runs N]
     python bench/sandbox_overhead.py --runtime-start [--runs N]
The first needs a Docker engine and the sandbox image (`revise sandbox build`).
``--startup`` times a trivial probe (``python3 -I -S -B -c pass``) from
``launch`` to its exit, and the cleanup after it, for every runner: the weak
rlimits-only child, the bubblewrap sandbox, a Docker container.
``--runtime-start`` measures the CPU one start of the runtime costs (the sandbox's
Python, outside any sandbox, whose cost is the same for all three): a bare
interpreter, the runtime from ``runtime.py``, the runtime from the host-compiled
``runtime.pyc`` the process sandbox runs; each connects to a socket that closes.
Prints figures and ratios side by side; nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from broker.envelope import Envelope, SandboxLimits
from broker.providers import ProviderLog
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from sandbox.docker_runner import DockerRunner
from sandbox.runner import ProcessRunner, Runner, WeakProcessRunner

ONE_CALL = ('async def orchestrate(ctx, args):\n'
            '    return await ctx.run("text.generate", {"prompt": args["p"]})\n')


def _calls_script(n: int) -> str:
    return ("async def orchestrate(ctx, args):\n"
            f"    for i in range({n}):\n"
            '        await ctx.run("text.generate", {"prompt": f"call {i}"})\n'
            "    return 1\n")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _first_rpc_ms(services, run_id: str) -> float:
    """Sandbox start event to the first provider answer, from the store and the log."""
    events = {e.kind: e.created_at for e in services.store.list_events(run_id)}
    log = ProviderLog(services.settings.provider_log_path).read()
    first = next(e for e in log if e["run_id"] == run_id)
    ts = datetime.fromisoformat(first["ts"])
    return (ts - events["sandbox_start"]).total_seconds() * 1000


def bench_runner(kind: str, jobs: int, calls: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(home=Path(tmp), sandbox=SandboxKind(kind.split("-")[0]))
        runner = ProcessRunner() if kind == "process" else DockerRunner(
            settings, warm=2 if kind == "docker-warm" else 0)
        services = open_services(settings, runner=runner)
        pipeline = services.pipeline()
        job_ms, first_ms = [], []
        for i in range(jobs):
            start = time.perf_counter()
            report = pipeline.run(f"job-{i}", ONE_CALL, {"p": f"job {i}"}, Envelope()).to_json()
            job_ms.append((time.perf_counter() - start) * 1000)
            assert report["status"] == "succeeded", report["error"]
            first_ms.append(_first_rpc_ms(services, f"job-{i}"))
        start = time.perf_counter()
        pipeline.run("many", _calls_script(calls), {}, Envelope())
        many = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        replay = pipeline.run("many", _calls_script(calls), {}, Envelope()).to_json()
        replay_ms = (time.perf_counter() - start) * 1000
        assert replay["calls"]["replayed"] == calls
        services.close()
        if isinstance(runner, DockerRunner):
            runner.close()
    one = statistics.median(job_ms)
    return {"job_p50": one, "job_p95": _pct(job_ms, 0.95), "first_rpc_p50": _pct(first_ms, .5),
            "first_rpc_p95": _pct(first_ms, .95),
            "per_replay_call": (replay_ms - one) / calls, "per_new_call": (many - one) / calls}


def bench_in_process(calls: int) -> float:
    """The same replay through Broker.execute directly, without any sandbox or RPC."""
    from broker.calls import CallRequest
    from broker.catalog import CATALOG
    from broker.identity import Identity, call_digest

    def request(i: int) -> CallRequest:
        payload = CATALOG["text.generate"].normalize({"prompt": f"call {i}"})
        return CallRequest("direct", 1, Identity("orchestrate/for0/#0", (), i),
                           "text.generate", payload, call_digest(payload), "fp")

    with tempfile.TemporaryDirectory() as tmp:
        services = open_services(Settings(home=Path(tmp)), runner=ProcessRunner())
        broker = services.broker(Envelope())
        services.store.ensure_run("direct")
        services.store.add_revision("direct", "# bench", "d")
        requests = [request(i) for i in range(calls)]
        for call in requests:
            broker.execute(call)
        start = time.perf_counter()
        for call in requests:
            broker.execute(call)
        per_call = (time.perf_counter() - start) * 1000 / calls
        services.close()
    return per_call


def _startup_runners(python: str) -> dict[str, Runner]:
    probe = (python, "-I", "-S", "-B", "-c", "pass")
    runners: dict[str, Runner] = {
        "weak child": WeakProcessRunner(command=probe),
        "weak child, host python": WeakProcessRunner(command=(sys.executable, *probe[1:])),
        "bwrap": ProcessRunner(command=probe),
    }
    from sandbox.select import docker_ready

    settings = Settings()
    if docker_ready(settings):
        runners["docker"] = DockerRunner(settings, command=("python3", *probe[1:]))
    return runners


def bench_startup(runs: int) -> dict[str, tuple[float, float, float]]:
    """(p50 start-to-exit, p95 start-to-exit, p50 cleanup) in ms for each runner."""
    python = ProcessRunner().profile(SandboxLimits()).python  # the sandbox's own Python
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, runner in _startup_runners(python).items():
            started, cleaned = [], []
            for i in range(runs + 1):  # the first run warms caches (and the preflight)
                begin = time.perf_counter()
                launched = runner.launch(f"bench-{i}", Path(tmp) / f"r{len(figures)}-{i}",
                                         SandboxLimits())
                code = launched.sandbox.wait(60)
                exited = time.perf_counter()
                launched.sandbox.cleanup()
                launched.listener.close()
                assert code == 0, launched.sandbox.output()
                if i:
                    started.append((exited - begin) * 1000)
                    cleaned.append((time.perf_counter() - exited) * 1000)
            figures[name] = (statistics.median(started), _pct(started, .95),
                             statistics.median(cleaned))
    return figures


def print_startup(runs: int) -> None:
    figures = bench_startup(runs)
    base = figures["weak child"][0]
    print(f"trivial probe, {runs} runs{'':14}{'p50 ms':>10}{'p95 ms':>10}{'cleanup':>10}"
          f"{'x weak':>8}")
    for name, (p50, p95, cleanup) in figures.items():
        print(f"{name:38}{p50:>10.1f}{p95:>10.1f}{cleanup:>10.1f}{p50 / base:>8.2f}")


def bench_runtime_start(runs: int) -> dict[str, float]:
    """ms of CPU (the children's rusage) per start, for each way of starting."""
    import resource
    import socket
    import subprocess
    import threading

    from sandbox.job import COMPILED_RUNTIME, runtime_contents

    python = ProcessRunner().profile(SandboxLimits()).python
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="rt-") as tmp:
        for name, data in runtime_contents(compiled=True):  # what a process sandbox holds
            (Path(tmp) / name).parent.mkdir(exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        path = str(Path(tmp) / "s.sock")
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(path)
        listener.listen(64)

        def refuse() -> None:  # the runtime gets no job: it stops once connected
            while True:
                try:
                    listener.accept()[0].close()
                except OSError:
                    return

        threading.Thread(target=refuse, daemon=True).start()
        ways = {"bare interpreter (-c pass)": ["-c", "pass"],
                "runtime.py": [str(Path(tmp) / "runtime.py"), path],
                "runtime.pyc": [str(Path(tmp) / COMPILED_RUNTIME), path]}
        for label, args in ways.items():
            command = [python, "-I", "-S", "-B", *args]
            subprocess.run(command, stderr=subprocess.DEVNULL, check=False)  # warm
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            for _ in range(runs):
                subprocess.run(command, stderr=subprocess.DEVNULL, check=False)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            figures[label] = ((after.ru_utime + after.ru_stime) - (before.ru_utime
                              + before.ru_stime)) * 1000 / runs
        listener.close()
    return figures


def print_runtime_start(runs: int) -> None:
    figures = bench_runtime_start(runs)
    bare = figures["bare interpreter (-c pass)"]
    print(f"runtime start, {runs} runs{'':12}{'CPU ms':>10}{'x bare':>8}")
    for name, cpu in figures.items():
        print(f"{name:38}{cpu:>10.1f}{cpu / bare:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--startup", action="store_true",
                        help="only time sandbox start-to-exit of a trivial probe")
    parser.add_argument("--runtime-start", action="store_true",
                        help="only the CPU of one runtime start: source, compiled, bare")
    parser.add_argument("--runs", type=int, default=30)
    opts = parser.parse_args()
    if opts.runtime_start:
        print_runtime_start(opts.runs)
        return
    if opts.startup:
        print_startup(opts.runs)
        return
    process = bench_runner("process", opts.jobs, opts.calls)
    docker = bench_runner("docker", opts.jobs, opts.calls)
    warm = bench_runner("docker-warm", opts.jobs, opts.calls)
    direct = bench_in_process(opts.calls)
    print(f"{'':34}{'process':>10}{'docker':>10}{'warm':>10}{'docker/process':>16}"
          f"{'cold/warm':>11}")
    for key, label in [("job_p50", "one-call job, p50 (ms)"), ("job_p95", "one-call job, p95"),
                       ("first_rpc_p50", "start to first RPC, p50"),
                       ("first_rpc_p95", "start to first RPC, p95"),
                       ("per_new_call", "per new call (ms)"),
                       ("per_replay_call", "per replay call (ms)")]:
        print(f"{label:34}{process[key]:>10.2f}{docker[key]:>10.2f}{warm[key]:>10.2f}"
              f"{docker[key] / process[key]:>16.2f}{docker[key] / warm[key]:>11.2f}")
    print(f"replay hit without sandbox/RPC (Broker.execute): {direct:.3f} ms/call; "
          f"RPC round trip adds {docker['per_replay_call'] - direct:.3f} ms in the container, "
          f"{process['per_replay_call'] - direct:.3f} ms in the process sandbox")


if __name__ == "__main__":
    main()

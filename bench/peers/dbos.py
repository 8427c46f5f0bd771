"""DBOS Transact (SQLite system database): async workflows of async steps.

Replay forks a finished workflow past its last step (every step output is
copied and served from the record); the repair forks the failed workflow at
its first failed step (DBOS's step-level recovery), with the repaired code
deployed in its place.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path

from dbos import DBOS, SetWorkflowID

from . import BAD_SIZE, FAILING_BRANCH, GOOD_SIZE, LoopThread, ProviderStandIn

PROVIDER = ProviderStandIn()
_DEPLOYED = {"repaired": False}  # which version of the repair workflow is deployed


@DBOS.step()
async def noop(prompt: str) -> str:
    return prompt


@DBOS.step()
async def image(prompt: str, size: str) -> dict[str, str]:
    return PROVIDER.call(prompt, size)


@DBOS.workflow()
async def sequential(n: int) -> int:
    for i in range(n):
        await noop(f"p{i}")
    return n


@DBOS.workflow()
async def fanout(n: int) -> int:
    await asyncio.gather(*[noop(f"p{i}") for i in range(n)])
    return n


@DBOS.workflow()
async def fanout_repair(n: int) -> int:
    repaired = _DEPLOYED["repaired"]

    def size(i: int) -> str:
        return BAD_SIZE if i == FAILING_BRANCH and not repaired else GOOD_SIZE

    results = await asyncio.gather(*[image(f"shot {i}", size(i)) for i in range(n)],
                                   return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    if failed:
        raise failed[0]
    return len(results)


class DbosPeer:
    name = "DBOS"

    def __init__(self, home: Path) -> None:
        logging.getLogger("dbos").setLevel(logging.WARNING)
        self._loop = LoopThread()
        DBOS(config={"name": "revise-peers",
                     "system_database_url": f"sqlite:///{home / 'dbos.sqlite'}",
                     "log_level": "WARNING"})
        DBOS.launch()

    def close(self) -> None:
        DBOS.destroy(destroy_registry=False)
        self._loop.close()

    def _timed(self, coro) -> float:
        async def timed() -> float:
            started = time.perf_counter()
            await coro
            return time.perf_counter() - started

        return self._loop.run(timed())

    def sequential(self, n: int) -> float:
        return self._timed(sequential(n))

    def fanout(self, n: int) -> float:
        return self._timed(fanout(n))

    def replay(self, n: int) -> float:
        workflow_id = f"replay-{uuid.uuid4().hex}"

        async def record() -> None:
            with SetWorkflowID(workflow_id):
                await sequential(n)

        self._loop.run(record())

        async def forked() -> None:
            handle = await DBOS.fork_workflow_async(workflow_id, n + 1)
            await handle.get_result()

        return self._timed(forked())

    def concurrent(self, jobs: int, calls: int) -> float:
        async def all_jobs() -> None:
            await asyncio.gather(*[sequential(calls) for _ in range(jobs)])

        return self._timed(all_jobs())

    def repair(self, n: int) -> int:
        before = PROVIDER.attempts
        workflow_id = f"repair-{uuid.uuid4().hex}"

        async def episode() -> None:
            _DEPLOYED["repaired"] = False
            try:
                with SetWorkflowID(workflow_id):
                    await fanout_repair(n)
                raise AssertionError("the first run was meant to fail")
            except ValueError:
                pass
            steps = await DBOS.list_workflow_steps_async(workflow_id)
            first_failed = min(s["function_id"] for s in steps if s["error"] is not None)
            _DEPLOYED["repaired"] = True  # deploy the repaired code, then fork
            handle = await DBOS.fork_workflow_async(workflow_id, first_failed)
            assert await handle.get_result() == n

        self._loop.run(episode())
        return PROVIDER.attempts - before

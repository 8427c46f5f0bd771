"""Jobs that wait on a slow provider, one system per process (issue 26's workload).

N jobs, each K sequential image calls to ``bench/peers/slow_provider.py`` (every
request answered after L seconds), submitted at once to one system, as shipped:

* Revise: the Procfile stack (``honcho start``: dispatcher, sandbox worker, broker
  worker, reconciler, Flower) on a scratch PostgreSQL database, the HTTP provider
  pointed at the slow one, the process sandbox;
* Temporal: its CLI's dev server (``--db-filename``, durable) and one worker in this
  process with the SDK's default limits, each call an async activity;
* DBOS: workflows of async steps in this process, SQLite system database.

Prints one JSON object: the makespan (submit of the first job to the result of the
last) and the peak PSS of the system's processes (this process included for the
in-process peers; PostgreSQL apart). The provider counts the charges and its peak
concurrency. Run by ``bench/peers.py --slow``; alone:

    python bench/peers/slow_jobs.py --system revise --jobs 20 --calls 4 --provider URL
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# Run as a script, this folder is first on the path, where peers/dbos.py would shadow dbos.
sys.path[:] = [str(ROOT / "bench"), str(ROOT),
               *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

from peers.memory import PeakPss, pss_bytes, tree  # noqa: E402

_TEMPORAL: dict[str, Any] = {}  # the provider URL the activity posts to

try:  # Temporal's workflows and activities must be module-level definitions
    from datetime import timedelta

    from temporalio import activity, workflow

    @activity.defn(name="slow_image")
    async def slow_image(prompt: str) -> str:
        import httpx

        client = _TEMPORAL.get("http")
        if client is None:
            client = _TEMPORAL["http"] = httpx.AsyncClient(
                limits=httpx.Limits(max_connections=None))
        return await _post(client, _TEMPORAL["provider"], prompt)

    @workflow.defn(name="SlowJob")
    class SlowJob:
        @workflow.run
        async def run(self, job: str, calls: int) -> list[str]:
            return [await workflow.execute_activity(
                slow_image, f"{job} {i}", start_to_close_timeout=timedelta(seconds=600))
                for i in range(calls)]
except ImportError:  # the peers extra is missing: only --system revise runs
    pass


def revise(jobs: int, calls: int, provider: str, home: Path,
           after: Callable[[str], None] | None = None) -> dict[str, float]:
    """``after(database_url)``: called once every job ended, before the stack stops and
    its scratch database is dropped (``bench/slow_timeline.py`` reads the store there)."""
    from broker.database import prepare_database
    from broker.envelope import Envelope
    from peers.revise import redis_url
    from peers.scratch import PG_ADMIN, scratch_database
    from tests.workers.conftest import Stack

    script = ("async def orchestrate(ctx, args):\n    out = []\n"
              f"    for i in range({calls}):\n"
              '        image = await ctx.run("image.generate", {"prompt": args["job"] + '
              '" " + str(i)})\n        out.append(image["artifact"]["id"])\n'
              "    return out\n")
    with scratch_database(PG_ADMIN) as database_url:
        prepare_database(database_url)  # `revise db upgrade`, as the README's deployment
        stack = Stack(home, database_url, redis_url())
        stack.env.update({"REVISE_SANDBOX": "process", "REVISE_PROVIDER": "http",
                          "REVISE_PROVIDER_BASE_URL": provider,
                          "REVISE_PROVIDER_API_KEY": "sk-bench"})
        try:
            stack.procfile(flower_port=_free_port())
            stack.wait_ready(180)
            time.sleep(3)  # warm sandboxes and Flower settle
            roots = [proc.pid for proc in stack.procs]
            idle = pss_bytes(tree(roots))
            memory = PeakPss(roots)
            started = time.perf_counter()
            handles = [stack.client.submit(script, {"job": f"job {n}"}, Envelope(),
                                           f"slow-{uuid.uuid4().hex[:8]}")
                       for n in range(jobs)]
            for handle in handles:
                report = handle.wait(3600)
                if report["status"] != "succeeded":
                    raise RuntimeError(f"a Revise job ended {report['status']}: "
                                       f"{report['error']}")
            makespan = time.perf_counter() - started
            got = {"makespan": makespan, "peak_pss": memory.close(), "idle_pss": idle}
            if after is not None:
                after(database_url)
            return got
        finally:
            stack.stop()


async def _post(client: Any, provider: str, prompt: str) -> str:
    response = await client.post(f"{provider}/images/generations",
                                 json={"prompt": prompt, "size": "1024x1024"},
                                 headers={"authorization": "Bearer sk-bench"}, timeout=600)
    response.raise_for_status()
    return str(response.json()["data"][0]["b64_json"])[:8]


def temporal(jobs: int, calls: int, provider: str, home: Path) -> dict[str, float]:
    from temporalio.worker import UnsandboxedWorkflowRunner, Worker

    from peers.temporal import TemporalPeer

    _TEMPORAL["provider"] = provider
    peer = TemporalPeer(home)
    try:
        worker = Worker(peer.client, task_queue="slow", workflows=[SlowJob],
                        activities=[slow_image], workflow_runner=UnsandboxedWorkflowRunner())
        running = peer._loop.run(_started(worker.run()))
        roots = [os.getpid(), peer._server.pid]
        idle = pss_bytes(tree(roots))
        memory = PeakPss(roots)

        async def all_jobs() -> float:
            started = time.perf_counter()
            await asyncio.gather(*[peer.client.execute_workflow(
                "SlowJob", args=[f"job {n}", calls], id=uuid.uuid4().hex, task_queue="slow")
                for n in range(jobs)])
            return time.perf_counter() - started

        makespan = peer._loop.run(all_jobs(), timeout=3600)
        peak = memory.close()
        peer._loop.run(_stopped(worker, running))
        return {"makespan": makespan, "peak_pss": peak, "idle_pss": idle}
    finally:
        peer.close()


def dbos(jobs: int, calls: int, provider: str, home: Path) -> dict[str, float]:
    import httpx
    from dbos import DBOS

    from peers import LoopThread

    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=None))

    @DBOS.step()
    async def slow_image(prompt: str) -> str:
        return await _post(http, provider, prompt)

    @DBOS.workflow()
    async def slow_job(job: str) -> list[str]:
        return [await slow_image(f"{job} {i}") for i in range(calls)]

    loop = LoopThread()
    DBOS(config={"name": "revise-slow-jobs",
                 "system_database_url": f"sqlite:///{home / 'dbos.sqlite'}",
                 "log_level": "WARNING"})
    DBOS.launch()
    try:
        idle = pss_bytes([os.getpid()])
        memory = PeakPss([os.getpid()])

        async def all_jobs() -> float:
            started = time.perf_counter()
            await asyncio.gather(*[slow_job(f"job {n}") for n in range(jobs)])
            return time.perf_counter() - started

        makespan = loop.run(all_jobs(), timeout=3600)
        return {"makespan": makespan, "peak_pss": memory.close(), "idle_pss": idle}
    finally:
        DBOS.destroy(destroy_registry=False)
        loop.close()


async def _started(coro: Any) -> Any:
    return asyncio.ensure_future(coro)


async def _stopped(worker: Any, running: Any) -> None:
    await worker.shutdown()
    await running


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


SYSTEMS = {"revise": revise, "temporal": temporal, "dbos": dbos}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=sorted(SYSTEMS), required=True)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--provider", required=True, help="the slow provider's /v1 URL")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"revise-slow-{opts.system}-") as tmp:
        got = SYSTEMS[opts.system](opts.jobs, opts.calls, opts.provider, Path(tmp))
    print(json.dumps(got))


if __name__ == "__main__":
    main()

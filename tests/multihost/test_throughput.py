"""Calls/s with broker workers split across the two "hosts" against both on one host.

A measurement printed into the test output (run with ``-s``), the figure the issue
asks for: claimed calls straight to the broker queue, as a sandbox job sends them,
two broker worker processes (-c 8) either both on host B or one on each
host. The assertions hold what must be true whatever the numbers: every call runs
once, on the host whose worker took it.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.calls import CallRequest
from broker.catalog import CATALOG
from broker.claim import Claimer
from broker.envelope import Envelope
from broker.identity import Identity, call_digest
from broker.records import AttemptStatus
from workers.routing import CAPABILITY_TASK

from .conftest import HOST_A, HOST_B, provider_log, share_object_store

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.slow]

CALLS = 160
LATENCY = "0.02"  # seconds of simulated provider time per call


def _calls_per_second(stack, run_id: str) -> float:
    """Calls claimed as a sandbox job claims them, executed by the broker workers from
    their attempt ids; done when their slots are committed."""
    stack.store.ensure_run(run_id)
    revision = stack.store.add_revision(run_id, "# throughput", "digest")
    app, queue = stack.client.app, stack.client.app.routing.queue("capabilities")
    claimer = Claimer(store=stack.store, envelope=Envelope(), settings=stack.settings)

    def call(n: int) -> None:
        payload = CATALOG["text.generate"].normalize({"prompt": f"throughput {n}"})
        request = CallRequest(run_id, revision, Identity("orchestrate/for0/#0", (), n),
                              "text.generate", payload, call_digest(payload), "fp")
        (decided,) = claimer.claim([request])
        assert decided.claimed is not None
        app.send_task(CAPABILITY_TASK, args=[{"run_id": run_id, "revision": revision,
                                              "attempts": [decided.claimed.attempt.id]}],
                      queue=queue)
        deadline = time.monotonic() + 120
        while stack.store.get_slot(run_id, request.identity) is None:
            assert time.monotonic() < deadline, f"call {n} was not committed"
            time.sleep(0.02)

    call(10_000)  # warm both the store and the queue once
    started = time.perf_counter()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(call, range(CALLS)))
    rate = CALLS / (time.perf_counter() - started)
    attempts = stack.store.list_attempts(run_id)
    assert len(attempts) == CALLS + 1
    assert all(a.status is AttemptStatus.SUCCEEDED for a in attempts)
    return rate


def _rate(make_stack, s3_env, hosts: tuple[str, str], run_id: str) -> tuple[float, dict]:
    stack = make_stack()
    share_object_store(stack, s3_env)
    for index, host in enumerate(hosts):
        stack.worker("capabilities", concurrency=8, index=index, host=host,
                     env={"REVISE_CELERY_LOCAL_LATENCY": LATENCY})
    stack.wait_ready(60)
    try:
        rate = _calls_per_second(stack, run_id)
    finally:
        stack.stop()
    per_host = {h: sum(1 for line in provider_log(stack.tmp_path / h)
                       if line.get("run_id") == run_id) for h in set(hosts)}
    return rate, per_host


def test_broker_workers_split_across_hosts_against_one_host(make_stack, s3_env) -> None:
    one, on_one = _rate(make_stack, s3_env, (HOST_B, HOST_B), "tp-one-host")
    split, on_split = _rate(make_stack, s3_env, (HOST_A, HOST_B), "tp-two-hosts")
    print(f"\nbroker throughput, {CALLS} calls (text.generate, {LATENCY} s provider time), "
          f"2 worker processes x 8 threads:\n"
          f"  both on one host:        {one:7.1f} calls/s  {on_one}\n"
          f"  split across two hosts:  {split:7.1f} calls/s  {on_split}\n"
          f"  ratio split / one host:  {split / one:7.2f}x")
    assert sum(on_one.values()) == CALLS + 1 == sum(on_split.values())
    assert on_split[HOST_A] and on_split[HOST_B], "both hosts took calls"

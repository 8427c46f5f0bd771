"""What a finished run leaves in Redis (issue 29, item 8): every key it made expires
(task results after REVISE_CELERY_RESULT_EXPIRES_SECONDS, job answers and start counts
after a day, leases with their TTL); the paid-payload ledger is the run store's. The
periodic sweep leaves nothing. What stays for good is the stack's own: queue bindings,
the broker roster, one counter, and kombu's record of the deliveries in flight."""

from __future__ import annotations

import time

import pytest
import redis

from broker.envelope import Envelope

from .conftest import script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SHOTS = {"shots": ["a", "b", "c", "d"]}
DAY = 24 * 3600
UNACKED = ("unacked", "unacked_index", "unacked_mutex")  # kombu's Redis transport


def _keys(url: str) -> dict[str, int]:
    """Every key of the db and its TTL in seconds (-1: none)."""
    client = redis.Redis.from_url(url)
    try:
        return {key.decode(): client.ttl(key) for key in client.scan_iter(count=1000)}
    finally:
        client.close()


def test_every_key_of_a_finished_run_expires(make_stack, redis_url) -> None:
    stack = make_stack(reconcile_interval=0.5, result_expires_seconds=3600)
    for role in ("dispatch", "sandbox", "capabilities"):
        stack.worker(role, concurrency=2)
    stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready(120)
    first = stack.client.submit(script("fanout_v1"), SHOTS, Envelope(), "kept").wait(120)
    repair = stack.client.submit(script("fanout_repaired"), SHOTS, Envelope(), "kept").wait(120)
    assert (first["status"], repair["status"]) == ("failed", "succeeded")
    time.sleep(3)  # several sweeps

    prefix = stack.prefix
    for_good = {f"revise:{prefix}brokers", f"revise:{prefix}stale-deliveries"}
    keys = _keys(redis_url)
    jobs = [stack.store.job_for_revision("kept", n).job_id for n in (1, 2)]
    lasting = {k for k, ttl in keys.items() if ttl < 0} - for_good
    # kombu's own: the queue bindings, and the deliveries in flight right now (a sweep
    # the beat just sent), none of them the finished run's
    assert {k for k in lasting if not k.startswith("_kombu.binding")} <= set(UNACKED), lasting
    in_flight = redis.Redis.from_url(redis_url).hvals("unacked")
    assert not [m for m in in_flight if any(job.encode() in m for job in jobs)], in_flight
    results = {k: ttl for k, ttl in keys.items() if k.startswith("celery-task-meta-")}
    assert results and all(0 < ttl <= 3600 for ttl in results.values()), results
    # the two jobs' tasks only (dispatch, sandbox, their waves): no sweep among them
    assert all(k.removeprefix("celery-task-meta-").split("/")[0] in jobs
               for k in results), sorted(results)
    job_keys = {k: ttl for k, ttl in keys.items() if k.startswith(f"revise:{prefix}job:")}
    assert job_keys and all(0 < ttl <= DAY for ttl in job_keys.values())

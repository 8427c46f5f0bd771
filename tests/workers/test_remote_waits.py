"""A sandbox job's wait for a call is bounded by liveness, not a 900 s constant (issue 17).

A call whose task message was lost (Redis lost it) is sent once more; a call that
no live broker worker can take stops fail-closed within about two leases.
"""

from __future__ import annotations

import time

import pytest

from broker.envelope import Envelope
from workers.transport import Transport

from .conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

LEASE = 6


def _stack(make_stack):
    stack = make_stack()
    stack.env["REVISE_ATTEMPT_LEASE_SECONDS"] = str(LEASE)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.wait_ready(120)
    return stack


def test_a_call_no_live_broker_can_take_stops_fail_closed(make_stack) -> None:
    stack = _stack(make_stack)
    started = time.monotonic()
    report = stack.client.submit(script("crash_seq"), {}, Envelope(), "r").wait(120)
    waited = time.monotonic() - started
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "AttemptInFlight"
    assert "no live broker worker" in report["error"]["message"]
    assert f"-Q {stack.prefix}capabilities" in report["error"]["message"]  # the queue to start
    assert waited < 4 * LEASE + 15, waited  # not capability_wait_seconds (900 s)
    assert stack.provider_log() == []
    # The claim nobody took is taken back when the revision ends: nothing was sent.
    [attempt] = stack.store.list_attempts("r")
    assert attempt.status == "abandoned" and attempt.sent_at is None


def test_a_lost_call_message_is_sent_again_and_paid_once(make_stack) -> None:
    stack = _stack(make_stack)
    queue = stack.client.app.routing.queue("capabilities")
    transport = Transport(stack.context.broker_redis)
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "r")
    wait_for(lambda: stack.context.broker_redis.llen(queue), 60, "the call's task message")
    assert any("/calls/" in task for task in transport.task_ids(queue))
    stack.context.broker_redis.delete(queue)  # Redis lost it before any broker took it
    stack.worker("capabilities", concurrency=2)
    started = time.monotonic()
    report = handle.wait(120)
    assert report["status"] == "succeeded", report["error"]
    assert time.monotonic() - started > LEASE  # it waited a lease, then sent the call again
    assert [line["identity"] for line in stack.provider_log()] == [
        "orchestrate/#0@:0", "orchestrate/#1@:0"]


def test_a_job_its_dead_worker_took_and_never_started_is_queued_again(make_stack) -> None:
    """A worker took the sandbox message (kombu's unacked set holds it until the
    visibility timeout, an hour) and died before starting it: the requeue sweep does not
    take "delivered" for "alive", queues it again, and the job runs and pays once."""
    from datetime import UTC, datetime, timedelta

    from workers.recovery import requeue_lost_jobs, sandbox_task_id

    stack = make_stack()
    stack.worker("dispatch")
    stack.wait_ready(120)
    queue = stack.client.app.routing.queue("sandbox")
    client = stack.context.broker_redis
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "r")
    raw = wait_for(lambda: client.lpop(queue), 60, "the sandbox job's message")
    client.hset("unacked", "tag-of-a-dead-worker", f'[{raw.decode()}, "", "{queue}"]')
    later = datetime.now(UTC) + timedelta(seconds=stack.context.settings.requeue_after_seconds
                                          + 1)
    done = requeue_lost_jobs(stack.context, stack.client.app, now=later)
    assert done["requeued"] == [handle.job_id]
    assert sandbox_task_id(handle.job_id) in Transport(client).task_ids(queue, delivered=False)
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=2)
    report = handle.wait(120)
    assert report["status"] == "succeeded", report["error"]
    assert len(stack.provider_log()) == 2
    events = stack.store.list_events("r")
    assert any(e.kind == "job_requeued" and "never started" in e.message for e in events)

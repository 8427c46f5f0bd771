"""A dispatch message lost before any dispatcher recorded its job (kombu hands a message
over with BRPOP before the worker records it as delivered: a dispatcher killed between
the two loses it) is queued again by the reconciler, also for a client that did not
wait; what is kept for that is hostile input like the queue itself."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from broker.envelope import Envelope
from workers.outbox import KEEP_SECONDS, keep, resend_lost_dispatches
from workers.transport import Transport

from .conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _index(stack) -> list[str]:
    return [i.decode() for i in stack.context.broker_redis.zrange(
        f"{stack.prefix}revise-outbox", 0, -1)]


def test_a_dispatch_message_lost_as_a_dispatcher_took_it_is_sent_again(make_stack) -> None:
    stack = make_stack(reconcile_interval=1)
    stack.env["REVISE_REQUEUE_AFTER_SECONDS"] = "2"
    stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready(60)
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "lost-dispatch")
    queue = stack.client.app.routing.queue("dispatch")
    redis = stack.context.broker_redis
    assert Transport(redis).holds(queue, handle.job_id)
    redis.delete(queue)  # what a dispatcher killed between BRPOP and recording it leaves
    assert _index(stack) == [handle.job_id]

    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=2)
    stack.wait_ready(120)
    # No client waits (`revise submit` without --wait): only the reconciler can send it.
    run = wait_for(lambda: (r := stack.store.get_run("lost-dispatch")) is not None
                   and r.status.value == "succeeded" and r, 120, "the run, once resent")
    assert run.revisions == 1
    assert stack.store.get_job(handle.job_id) is not None
    wait_for(lambda: _index(stack) == [], 30, "the kept message forgotten once taken")


def test_kept_messages_are_checked_and_forgotten_once_taken(make_stack) -> None:
    """Anyone who can write to Redis can write a kept message: one that is not a dispatch
    message of its job id (not JSON, not a string, under a name that is no job id or not
    even text), or too large, is dropped unsent, and the good one is still sent (before,
    one such entry raised at every sweep, which then also skipped requeueing lost jobs);
    one a dispatcher took is forgotten; one past the limit of resends is given up."""
    stack = make_stack()
    redis, prefix, app = stack.context.broker_redis, stack.prefix, stack.client.app
    ctx = SimpleNamespace(broker_redis=redis, store=stack.store,
                          settings=stack.settings.model_copy(update={
                              "requeue_after_seconds": 1.0, "max_requeues": 1}))
    good = {"job_id": "a" * 32, "run_id": "kept", "script": script("crash_seq"), "args": {},
            "envelope": Envelope().model_dump(mode="json")}
    keep(redis, prefix, good["job_id"], good)
    keep(redis, prefix, "b" * 32, {**good, "job_id": "c" * 32})  # another job's message
    keep(redis, prefix, "d" * 32, {**good, "job_id": "d" * 32, "run_id": "../etc"})
    redis.set(f"{prefix}revise-outbox:{'e' * 32}", "{not json", ex=KEEP_SECONDS)
    redis.hset(f"{prefix}revise-outbox:{'g' * 32}", "x", "y")  # not a string at all
    redis.zadd(f"{prefix}revise-outbox", {"e" * 32: 0, "f" * 32: 0, "x/../y": 0,
                                          "g" * 32: 0, b"\xff\xfe": 0})
    later = 2e9
    assert resend_lost_dispatches(ctx, app, now=later) == {"resent": ["a" * 32],
                                                           "given_up": []}
    queued = Transport(redis).task_ids(app.routing.queue("dispatch"))
    assert queued == {"a" * 32}
    assert _index(stack) == ["a" * 32]
    stored = json.loads(redis.get(f"{prefix}revise-outbox:{'a' * 32}"))
    assert stored["resent"] == 1
    # Still queued: not sent again; gone from the queue again: past the limit, given up.
    assert resend_lost_dispatches(ctx, app, now=later + 10)["resent"] == []
    redis.delete(app.routing.queue("dispatch"))
    assert resend_lost_dispatches(ctx, app, now=later + 20) == {"resent": [],
                                                                "given_up": ["a" * 32]}
    assert _index(stack) == []

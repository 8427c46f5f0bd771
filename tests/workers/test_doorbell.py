"""The doorbell, on a real Redis: a waiter hears every ring, and whatever could have been
lost while the channel was not subscribed is made up by a ring to every waiter."""

from __future__ import annotations

import uuid

import redis

from tests.waiting import until
from workers.doorbell import Doorbell, ring


def test_a_ring_reaches_the_waiter_of_its_revision_only(redis_url) -> None:
    client = redis.Redis.from_url(redis_url)
    bell = Doorbell(client, "revise:t-doorbell:")
    with bell.waiting("run-a", 1) as a, bell.waiting("run-b", 1) as b:
        assert until(lambda: bell.listening)
        a.clear()
        b.clear()  # the rings of the subscription itself
        ring(client, bell.channel, "run-a", 1)
        assert a.wait(5)
        assert not b.is_set()
        ring(client, bell.channel, "run-a", 2)  # another revision of the run
        ring(client, bell.channel, "run-b", 1)
        assert b.wait(5)


def test_every_waiter_is_rung_when_the_subscription_starts_and_when_it_is_lost(
        redis_url) -> None:
    """A ring published before the channel was subscribed, or while it was not, is lost:
    every waiter is rung then, so it reads the store once and finds what was settled."""
    name = f"doorbell-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url, client_name=name)
    bell = Doorbell(client, "revise:t-doorbell:")
    ring(client, bell.channel, "run-a", 1)  # nobody listens yet: this ring is lost
    with bell.waiting("run-a", 1) as waiter:
        assert waiter.wait(5)  # the subscription's ring
        assert bell.listening
        waiter.clear()
        listeners = [c["id"] for c in client.client_list(_type="pubsub") if c["name"] == name]
        assert len(listeners) == 1
        client.client_kill_filter(_id=listeners[0])
        assert waiter.wait(5)  # lost, or subscribed again: either way it looks once
        assert until(lambda: bell.listening)
        waiter.clear()
        ring(client, bell.channel, "run-a", 1)
        assert waiter.wait(5)

"""When a waiting job parks (``workers.parking.ParkRule``): after a long wait whatever
the load, after a short one only while another job waits for a sandbox slot; and how
the sandbox worker sees that load (``Transport.waiting``, on the real Redis)."""

from __future__ import annotations

import time

import pytest

from workers.parking import ParkRule
from workers.transport import Transport


def _sent(seconds_ago: float) -> float:
    return time.monotonic() - seconds_ago


def test_a_long_wait_parks_whatever_the_load() -> None:
    rule = ParkRule(after=5.0, under_load_after=0.5, slot_wanted=lambda: False)
    assert not rule.due(_sent(4.0))
    assert rule.due(_sent(5.1))


def test_a_short_wait_parks_only_while_a_job_waits_for_a_slot() -> None:
    load = [False]
    rule = ParkRule(after=None, under_load_after=0.5, slot_wanted=lambda: load[0])
    assert not rule.due(_sent(0.6))
    load[0] = True
    assert rule.due(_sent(0.6))
    assert not rule.due(_sent(0.1))  # too short to be worth a resume


def test_no_rule_never_parks_and_never_asks_for_the_load() -> None:
    def asked() -> bool:
        raise AssertionError("the load was asked for")

    rule = ParkRule(after=None, under_load_after=None, slot_wanted=asked)
    assert not rule.due(_sent(3600.0))
    assert rule.next_look(_sent(0.0)) is None


def test_a_load_that_cannot_be_seen_keeps_the_slot(caplog) -> None:
    def redis_away() -> bool:
        raise ConnectionError("Redis is away")

    rule = ParkRule(after=None, under_load_after=0.1, slot_wanted=redis_away)
    assert not rule.due(_sent(1.0))
    assert "could not see whether jobs wait" in caplog.text


def test_the_next_look_comes_when_parking_may_become_due() -> None:
    rule = ParkRule(after=3.0, under_load_after=None)
    assert 2.8 < rule.next_look(_sent(0.0)) <= 3.0
    assert rule.next_look(_sent(10.0)) == pytest.approx(0.1)  # overdue: look soon
    loaded = ParkRule(after=None, under_load_after=0.2)
    # past the short threshold, the queue is looked at about once a second
    assert loaded.next_look(_sent(5.0)) == pytest.approx(1.0)


@pytest.mark.redis
def test_waiting_counts_queued_messages_of_every_priority(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url)
    queue = "t-park-sandbox"
    transport = Transport(client)
    assert transport.waiting(queue) == 0
    client.rpush(queue, b"{}", b"{}")
    client.rpush(f"{queue}\x06\x166", b"{}")
    client.hset("unacked", "tag", b"[{}, \"\", \"" + queue.encode() + b"\"]")
    try:
        assert transport.waiting(queue) == 3  # delivered (unacked) messages have a slot
    finally:
        client.delete(queue, f"{queue}\x06\x166", "unacked")

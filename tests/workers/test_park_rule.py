"""When a waiting job parks (``workers.parking.ParkRule``): after a long wait whatever
the load, after a short one only while another job waits for a sandbox slot; and how
the sandbox worker sees that load (``Transport.waiting``, on the real Redis)."""

from __future__ import annotations

import time

import pytest

from workers.parking import ParkRule, QueueLoad
from workers.transport import Transport


def _sent(seconds_ago: float) -> float:
    return time.monotonic() - seconds_ago


class _Demand:
    """``waiting`` jobs want a slot; ``give`` hands one out (or raises ``error``)."""

    def __init__(self, waiting: int = 0, error: Exception | None = None) -> None:
        self.jobs, self.error = waiting, error

    def waiting(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.jobs > 0

    def give(self) -> bool:
        if not self.waiting():
            return False
        self.jobs -= 1
        return True


def test_a_long_wait_parks_whatever_the_load() -> None:
    rule = ParkRule(after=5.0, under_load_after=0.5, demand=_Demand())
    assert not rule.due(_sent(4.0))
    assert rule.due(_sent(5.1))
    assert rule.park(_sent(5.1))


def test_a_short_wait_parks_only_while_a_job_waits_for_a_slot() -> None:
    demand = _Demand()
    rule = ParkRule(after=None, under_load_after=0.5, demand=demand)
    assert not rule.due(_sent(0.6))
    demand.jobs = 1
    assert rule.due(_sent(0.6))
    assert not rule.due(_sent(0.1))  # too short to be worth a resume
    assert not rule.park(_sent(0.1))
    assert demand.jobs == 1  # neither a look nor a short wait gave the slot away


def test_one_park_for_each_job_that_waits_for_a_slot() -> None:
    demand = _Demand(waiting=2)
    rule = ParkRule(after=None, under_load_after=0.5, demand=demand)
    parks = [rule.park(_sent(1.0)) for _ in range(5)]
    assert parks == [True, True, False, False, False]
    assert not rule.due(_sent(1.0))  # nobody is left to give a slot to


def test_no_rule_never_parks_and_never_asks_for_the_load() -> None:
    def asked() -> bool:
        raise AssertionError("the load was asked for")

    class Asked(_Demand):
        def waiting(self) -> bool:
            return asked()

    rule = ParkRule(after=None, under_load_after=None, demand=Asked())
    assert not rule.due(_sent(3600.0))
    assert not rule.park(_sent(3600.0))
    assert rule.next_look(_sent(0.0)) is None


def test_a_load_that_cannot_be_seen_keeps_the_slot(caplog) -> None:
    rule = ParkRule(after=None, under_load_after=0.1,
                    demand=_Demand(error=ConnectionError("Redis is away")))
    assert not rule.due(_sent(1.0))
    assert not rule.park(_sent(1.0))
    assert "could not see whether jobs wait" in caplog.text


def test_the_next_look_comes_when_parking_may_become_due() -> None:
    rule = ParkRule(after=3.0, under_load_after=None)
    assert 2.8 < rule.next_look(_sent(0.0)) <= 3.0
    assert rule.next_look(_sent(10.0)) == pytest.approx(0.1)  # overdue: look soon
    loaded = ParkRule(after=None, under_load_after=0.2)
    # past the short threshold, the queue is looked at about once a second
    assert loaded.next_look(_sent(5.0)) == pytest.approx(1.0)


def test_the_queue_load_gives_each_waiting_job_one_slot_and_counts_slots_given_lately(
) -> None:
    queued = [3]
    looks = []

    def count() -> int:
        looks.append(queued[0])
        return queued[0]

    load = QueueLoad(count, every=0.2)
    assert [load.give() for _ in range(4)] == [True, True, True, False]
    assert not load.waiting() and len(looks) == 1  # one look for every ask within `every`
    time.sleep(0.25)
    # The three jobs still show on the queue beside two new ones (their slots are not
    # taken yet): the slots given lately are counted against them.
    queued[0] = 5
    assert [load.give() for _ in range(3)] == [True, True, False]
    time.sleep(0.45)  # the old gifts are past: the queue alone counts
    queued[0] = 1
    assert load.give() and not load.give()


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

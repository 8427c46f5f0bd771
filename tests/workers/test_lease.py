"""Job leases against real Redis (no Celery): duplicates, takeovers, give-up."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from broker.owner import local_domain
from workers.lease import JobLease, Verdict

pytestmark = pytest.mark.redis

# A token of this host's process table with a pid that cannot exist here.
DEAD = f"v2:{socket.gethostname()}:{local_domain()}:000000000000:999999999:0:1"


@pytest.fixture
def lease(redis_url: str) -> JobLease:
    return JobLease(redis.Redis.from_url(redis_url), ttl=5, max_deliveries=3)


def test_first_delivery_runs_and_a_later_one_gets_the_stored_answer(lease: JobLease) -> None:
    grant = lease.begin("job-1")
    assert (grant.verdict, grant.starts) == (Verdict.RUN, 1)
    lease.finish(grant, {"status": "succeeded"})
    again = lease.begin("job-1")
    assert (again.verdict, again.answer) == (Verdict.DONE, {"status": "succeeded"})


def test_a_delivery_while_a_live_holder_runs_is_a_duplicate(lease: JobLease) -> None:
    results = []
    holder = lease.begin("job-2")
    thread = threading.Thread(target=lambda: results.append(lease.begin("job-2")))
    thread.start()  # another thread is another owner token, alive on this host
    thread.join()
    assert results[0].verdict is Verdict.DUPLICATE
    assert results[0].holder == holder.holder
    assert lease.duplicates("job-2") == 1


def test_a_dead_holder_is_taken_over_and_crash_loops_give_up(lease: JobLease) -> None:
    key = "revise:job:job-3:lease"
    verdicts = []
    for _ in range(4):
        lease._redis.set(key, DEAD, px=5000)  # the previous start died holding the lease
        grant = lease.begin("job-3")
        verdicts.append((grant.verdict, grant.starts))
    assert verdicts == [(Verdict.RUN, 1), (Verdict.RUN, 2), (Verdict.RUN, 3),
                        (Verdict.GIVE_UP, 4)]


def test_exclusive_serializes_holders(lease: JobLease) -> None:
    inside: list[int] = []
    overlap: list[bool] = []

    def hold(n: int) -> None:
        with lease.exclusive("call:x", timeout=5):
            overlap.append(bool(inside))
            inside.append(n)
            time.sleep(0.05)
            inside.remove(n)

    threads = [threading.Thread(target=hold, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlap == [False] * 4
    assert lease.holder("call:x") is None

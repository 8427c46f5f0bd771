"""Job leases against real Redis (no Celery): duplicates, takeovers, give-up."""

from __future__ import annotations

import socket
import threading

import pytest
import redis

from broker.owner import local_domain
from workers.lease import JobLease, LeaseVerdict, Released, run_leased

pytestmark = pytest.mark.redis

# A token of this host's process table with a pid that cannot exist here.
DEAD = f"v2:{socket.gethostname()}:{local_domain()}:000000000000:999999999:0:1"


@pytest.fixture
def lease(redis_url: str) -> JobLease:
    return JobLease(redis.Redis.from_url(redis_url), ttl=5, max_deliveries=3)


def test_first_delivery_runs_and_a_later_one_gets_the_stored_answer(lease: JobLease) -> None:
    grant = lease.begin("job-1")
    assert (grant.verdict, grant.starts) == (LeaseVerdict.RUN, 1)
    lease.finish(grant, {"status": "succeeded"})
    again = lease.begin("job-1")
    assert (again.verdict, again.answer) == (LeaseVerdict.DONE, {"status": "succeeded"})


def test_a_delivery_while_a_live_holder_runs_is_a_duplicate(lease: JobLease) -> None:
    results = []
    holder = lease.begin("job-2")
    thread = threading.Thread(target=lambda: results.append(lease.begin("job-2")))
    thread.start()  # another thread is another owner token, alive on this host
    thread.join()
    assert results[0].verdict is LeaseVerdict.DUPLICATE
    assert results[0].holder == holder.holder
    assert lease.duplicates("job-2") == 1


def test_a_dead_holder_is_taken_over_and_crash_loops_give_up(lease: JobLease) -> None:
    key = "revise:job:job-3:lease"
    verdicts = []
    for _ in range(4):
        lease._redis.set(key, DEAD, px=5000)  # the previous start died holding the lease
        grant = lease.begin("job-3")
        verdicts.append((grant.verdict, grant.starts))
    assert verdicts == [(LeaseVerdict.RUN, 1), (LeaseVerdict.RUN, 2), (LeaseVerdict.RUN, 3),
                        (LeaseVerdict.GIVE_UP, 4)]


def test_run_leased_stores_the_answer_and_releases_on_errors(lease: JobLease) -> None:
    calls: list[str] = []

    def run(grant) -> dict:
        calls.append(grant.holder)
        return {"ok": True}

    give_up = duplicate = lambda grant: {"gave": grant.verdict}
    assert run_leased(lease, "job-a", run=run, give_up=give_up, duplicate=duplicate) == {
        "ok": True}
    assert run_leased(lease, "job-a", run=run, give_up=give_up, duplicate=duplicate) == {
        "ok": True}
    assert len(calls) == 1 and lease.holder("job-a") is None

    def broken(grant) -> dict:
        raise RuntimeError("worker bug")

    with pytest.raises(RuntimeError):
        run_leased(lease, "job-b", run=broken, give_up=give_up, duplicate=duplicate)
    assert lease.holder("job-b") is None and lease.starts("job-b") == 1
    with pytest.raises(KeyError):  # an "uncounted" error gives the start back
        run_leased(lease, "job-b", run=lambda g: {}[1], give_up=give_up,
                   duplicate=duplicate, uncounted=(KeyError,))
    assert lease.starts("job-b") == 1
    assert run_leased(lease, "job-c", run=lambda g: Released({"stale": True}),
                      give_up=give_up, duplicate=duplicate) == {"stale": True}
    assert lease.answer("job-c") is None and lease.holder("job-c") is None

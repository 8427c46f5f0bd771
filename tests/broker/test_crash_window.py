"""The crash window's one rule and its one marking, shared by the broker, the sandbox
job waiting on a call and the reconciler's sweep."""

from __future__ import annotations

import socket
from dataclasses import replace
from datetime import timedelta

import pytest

from broker.crash_window import ALIVE_GRACE, attempt_expired, mark_unresolved
from broker.errors import StoreUnavailable
from broker.identity import Identity
from broker.owner import current_owner, local_domain
from broker.records import AttemptStatus
from broker.sqlstore import SqlStore
from orchestrator.reconcile import sweep

from .test_store import RUN, claim, run_parallel, slot

# A token of this host's process table with a pid that cannot exist here.
DEAD = f"v2:{socket.gethostname()}:{local_domain()}:000000000000:999999999:0:1"
ELSEWHERE = "v2:another-host:0123456789ab:000000000000:4242:0:1"


def test_a_dead_owner_here_expires_at_once_one_elsewhere_after_the_lease(store):
    attempt = claim(store).attempt
    now = attempt.heartbeat_at + timedelta(seconds=1)
    assert attempt_expired(replace(attempt, owner=DEAD), 30, now)
    assert not attempt_expired(replace(attempt, owner=ELSEWHERE), 30, now)
    assert attempt_expired(replace(attempt, owner=ELSEWHERE), 30, now + timedelta(seconds=30))
    mine = replace(attempt, owner=current_owner())  # alive: only past the grace
    assert not attempt_expired(mine, 30, now + timedelta(seconds=31))
    assert attempt_expired(mine, 30, now + timedelta(seconds=30 * ALIVE_GRACE + 1))


def test_each_attempt_is_marked_by_exactly_one_finder_with_one_event(store):
    attempt = claim(store).attempt
    found = run_parallel(4, lambda i: mark_unresolved(store, attempt, by=f"finder {i}",
                                                      reason="its owner is gone"))
    marked = [a for a in found if a is not None]
    assert len(marked) == 1 and marked[0].status is AttemptStatus.UNRESOLVED
    events = [e for e in store.list_events(RUN) if e.kind == "attempt_unresolved"]
    assert len(events) == 1 and events[0].data == {"attempt_id": attempt.id}


def test_an_attempt_whose_request_never_left_is_abandoned_not_unresolved(store):
    """Its dispatch record is written before the request leaves; without one nothing was
    paid, so a dead owner's unsent attempt is abandoned (the call may run again) and the
    owner, if it was only slow, finds it taken back and does not send."""
    attempt = claim(store, sent=False).attempt
    assert attempt.sent_at is None
    assert mark_unresolved(store, attempt, by="finder", reason="its owner is gone") is None
    assert store.latest_attempt(RUN, attempt.identity).status is AttemptStatus.ABANDONED
    assert not store.take_attempt(attempt.id, "w1")  # the slow owner must not send now
    (event,) = [e for e in store.list_events(RUN) if e.kind == "attempt_abandoned"]
    assert "never sent" in event.message
    sent = claim(store, Identity("orchestrate/#1", (), 0)).attempt
    assert sent.sent_at is not None
    assert mark_unresolved(store, sent, by="finder", reason="gone").status \
        is AttemptStatus.UNRESOLVED


def test_a_committed_attempt_is_not_marked(store):
    attempt = claim(store).attempt
    store.commit(slot(), attempt.id)
    assert mark_unresolved(store, attempt, by="late finder", reason="too late") is None
    assert [e for e in store.list_events(RUN) if e.kind == "attempt_unresolved"] == []
    assert store.latest_attempt(RUN, Identity("orchestrate/#0", (0, 3), 0)).status \
        is not AttemptStatus.UNRESOLVED


def test_a_lease_is_not_judged_on_time_the_store_was_away(store):
    """After an outage nobody could renew a lease in, its age counts from the moment the
    judge's store answered again: a live owner is not declared dead for the outage."""
    attempt = replace(claim(store).attempt, owner=ELSEWHERE)
    back = attempt.heartbeat_at + timedelta(seconds=62)  # the store was down 62 s
    assert attempt_expired(attempt, 30, back + timedelta(seconds=1))
    assert not attempt_expired(attempt, 30, back + timedelta(seconds=1), store_since=back)
    assert attempt_expired(attempt, 30, back + timedelta(seconds=31), store_since=back)
    # an outage before the last beat changes nothing
    earlier = attempt.heartbeat_at - timedelta(seconds=5)
    assert attempt_expired(attempt, 30, attempt.heartbeat_at + timedelta(seconds=31),
                           store_since=earlier)


def test_the_sweep_counts_a_lease_from_when_its_store_came_back(store):
    store.ensure_run(RUN)
    attempt = claim(store).attempt
    later = attempt.heartbeat_at + timedelta(seconds=30 * ALIVE_GRACE + 60)
    store.available_since = later - timedelta(seconds=1)
    assert sweep(store, 30, now=later) == []
    store.available_since = None
    assert [a.id for a in sweep(store, 30, now=later)] == [attempt.id]


def test_the_store_says_when_it_answered_again_after_an_outage():
    """A real PostgreSQL stopped and started again (its own cluster)."""
    from datetime import UTC, datetime

    from tests.faults.services import PrivatePostgres

    postgres = PrivatePostgres()
    postgres.start()
    store = SqlStore.open(postgres.url)
    try:
        store.list_runs()
        assert store.available_since is None  # it always answered
        postgres.stop()
        with pytest.raises(StoreUnavailable):
            store.list_runs()
        assert store.available_since is None
        postgres.start()
        before = datetime.now(UTC)
        store.list_runs()
        assert store.available_since is not None and store.available_since >= before
        seen = store.available_since
        store.list_runs()
        assert store.available_since == seen  # only a recovery moves it
    finally:
        store.close()
        postgres.close()


def test_the_mark_and_its_event_are_one_transaction(store):
    """Nobody reads an unresolved attempt without its event: when writing the event
    fails, the attempt stays pending."""
    attempt = claim(store).attempt

    def broken(_):
        raise RuntimeError("the event could not be written")

    with pytest.raises(RuntimeError):
        store.resolve_attempt(attempt.id, AttemptStatus.UNRESOLVED, operator="finder",
                              reason="gone", event_of=broken)
    assert store.latest_attempt(RUN, attempt.identity).status is AttemptStatus.PENDING
    marked = mark_unresolved(store, attempt, by="finder", reason="gone")
    assert marked is not None
    [event] = [e for e in store.list_events(RUN) if e.kind == "attempt_unresolved"]
    assert event.identity == str(attempt.identity) and event.revision == attempt.revision

"""A claimed attempt's life in the store: read back by its executor, taken once as its
request leaves, withdrawn when its revision stops, renewed only by its owner (SQLite and
PostgreSQL)."""

from __future__ import annotations

import time

from sqlalchemy import event

from broker.claim import budget_check
from broker.envelope import Budget
from broker.identity import Identity, call_bytes, call_digest
from broker.records import AttemptStatus, CallClaim
from broker.sqlstore import SqlStore

from .test_store import RUN, begin_wave, run_parallel, slot

PAYLOAD = {"prompt": "a fox", "size": "512x512"}


def _claim(store, n: int, *, take: int = 1, owner: str = "asker:1", budget=None):
    payload = {**PAYLOAD, "prompt": f"a fox {n}"}
    claim = CallClaim(Identity("orchestrate/#0", (), n), "image.generate",
                      call_digest(payload, take), payload=call_bytes(payload, take),
                      take=take, fingerprint="fp", chain_fingerprint="chain", line=7)
    return begin_wave(store, [claim], owner=owner, budget=budget)[0], payload


def test_an_executor_reads_back_exactly_what_was_claimed(store):
    first, payload = _claim(store, 0)
    second, payload2 = _claim(store, 1, take=2)
    ids = [first.attempt.id, second.attempt.id]
    calls = {c.attempt.id: c for c in store.claimed_calls(RUN, 1, [*ids, 10_000])}
    assert calls[first.attempt.id].payload == payload
    assert calls[second.attempt.id].payload == payload2  # a further take's blob unwrapped
    attempt = calls[second.attempt.id].attempt
    assert (attempt.take, attempt.fingerprint, attempt.chain_fingerprint, attempt.line) == (
        2, "fp", "chain", 7)
    assert store.claimed_calls("another-run", 1, ids) == []
    assert store.claimed_calls(RUN, 2, ids) == []
    assert store.take_attempt(first.attempt.id, "broker:1")
    assert [c.attempt.id for c in store.claimed_calls(RUN, 1, ids)] == [second.attempt.id]


def test_one_taker_sends_an_attempt(store):
    claimed, _ = _claim(store, 0)
    won = run_parallel(6, lambda i: store.take_attempt(claimed.attempt.id, f"broker:{i}"))
    assert sum(won) == 1
    taken = store.latest_attempt(RUN, claimed.attempt.identity)
    assert taken.sent_at is not None and taken.owner == f"broker:{won.index(True)}"


def test_a_withdrawn_claim_is_never_taken_and_costs_nothing(store):
    budget = budget_check(Budget(max_calls=1))
    claimed, _ = _claim(store, 0, budget=budget)
    taken, _ = _claim(store, 1, owner="other:1", budget=budget)
    assert taken.over_budget is not None  # the first claim holds the only call
    assert store.withdraw_unsent(RUN, 1, "someone-else:1", "stopped") == []
    assert store.withdraw_unsent(RUN, 1, "asker:1", "stopped") == [claimed.attempt.id]
    assert not store.take_attempt(claimed.attempt.id, "broker:1")
    withdrawn = store.latest_attempt(RUN, claimed.attempt.identity)
    assert withdrawn.status is AttemptStatus.ABANDONED and withdrawn.sent_at is None
    again, _ = _claim(store, 1, budget=budget)  # never sent: the budget has room again
    assert again.claimed and again.attempt.number == 0
    assert store.take_attempt(again.attempt.id, "broker:1")
    assert store.withdraw_unsent(RUN, 1, "asker:1", "stopped") == []  # sent: stays


def test_a_claim_of_a_stopped_revision_is_never_taken(store):
    claimed, _ = _claim(store, 0)
    store.finish_revision(RUN, 1, "stopped", {})
    assert not store.take_attempt(claimed.attempt.id, "broker:1")


def test_an_owner_renews_only_what_it_still_owns(store):
    mine, _ = _claim(store, 0, owner="host-a:11:1")
    taken, _ = _claim(store, 1, owner="host-a:11:2")
    assert store.take_attempt(taken.attempt.id, "host-b:22:1")  # a broker took it
    before = {a.id: a.heartbeat_at for a in store.list_attempts(RUN)}
    time.sleep(0.01)
    store.heartbeat_attempts([mine.attempt.id, taken.attempt.id], owner="host-a:11:")
    after = {a.id: a.heartbeat_at for a in store.list_attempts(RUN)}
    assert after[mine.attempt.id] > before[mine.attempt.id]
    assert after[taken.attempt.id] == before[taken.attempt.id]  # the broker's to renew


def test_settled_attempts_come_with_their_slots(store):
    done, _ = _claim(store, 0)
    failed, _ = _claim(store, 1)
    waiting, _ = _claim(store, 2)
    for claimed in (done, failed):
        assert store.take_attempt(claimed.attempt.id, "broker:1")
    committed = slot(done.attempt.identity, capability="image.generate",
                     digest=done.attempt.digest)
    store.commit(committed, done.attempt.id)
    store.fail_attempt(failed.attempt.id, {"code": "invalid_request", "charged": "no"})
    seen = {a.id: (a.status, s) for a, s in store.settled(
        RUN, [done.attempt.id, failed.attempt.id, waiting.attempt.id])}
    assert seen[done.attempt.id][0] is AttemptStatus.SUCCEEDED
    assert seen[done.attempt.id][1].result == committed.result
    assert seen[failed.attempt.id] == (AttemptStatus.FAILED, None)
    assert seen[waiting.attempt.id] == (AttemptStatus.PENDING, None)


def test_an_attempt_settled_while_a_copy_decides_it_is_replayed(postgres_url):
    """A copy of the call decides it while a broker commits the first copy's attempt: what
    the copy sees of that attempt is one state, read whole, so it replays the committed
    slot rather than finding a settled attempt in its way (which stopped it unresolved).
    PostgreSQL only: SQLite lets one writer in at a time, so nothing commits during a claim."""
    store = SqlStore.open(postgres_url)
    first, _ = _claim(store, 0)
    assert store.take_attempt(first.attempt.id, "broker:1")
    broker = SqlStore.open(postgres_url)
    committed = slot(first.attempt.identity, capability="image.generate",
                     digest=first.attempt.digest)

    def commit_after_the_first_read(conn, cursor, statement, *_: object) -> None:
        if "latest_id" in statement and not broker.list_slots(RUN):
            broker.commit(committed, first.attempt.id)

    event.listen(store.engine, "after_cursor_execute", commit_after_the_first_read)
    try:
        again, _ = _claim(store, 0, owner="copy:1")
    finally:
        event.remove(store.engine, "after_cursor_execute", commit_after_the_first_read)
        broker.close()
        store.close()
    assert again.slot is not None and again.slot.result == committed.result
    assert not again.in_the_way


def test_a_claim_answers_this_revisions_settled_calls_as_its_own_paid_work(store):
    """A job that parked (or was redelivered) asks again for calls its revision already
    settled: a maybe-charged failure is answered as the paid attempt it is, a committed
    call as executed at its cost, as when the answer first came (not at cost 0)."""
    from broker.calls import CallRequest, Outcome
    from broker.catalog import lookup
    from broker.claim import Claimer
    from broker.envelope import Envelope
    from broker.settings import Settings

    price = lookup("image.generate").unit_price
    requests = []
    for n, prompt in enumerate(["lost", "refused", "done"]):
        payload = lookup("image.generate").normalize({"prompt": prompt})
        requests.append(CallRequest(RUN, 1, Identity("orchestrate/#0", (), n),
                                    "image.generate", payload, call_digest(payload),
                                    "fp"))
    claimer = Claimer(store=store, envelope=Envelope(), settings=Settings())
    store.ensure_run(RUN)
    store.add_revision(RUN, "# src", "h")
    first = [d.claimed.attempt for d in claimer.claim(requests)]
    store.fail_attempt(first[0].id, {"code": "timeout", "charged": "maybe"}, uncertain=True)
    store.fail_attempt(first[1].id, {"code": "invalid_request", "charged": "no"})
    store.commit(slot(requests[2].identity, digest=requests[2].digest,
                      capability="image.generate"), first[2].id)
    again = [d.report for d in claimer.claim(requests)]
    assert [(r.outcome, r.attempted, r.cost) for r in again] == [
        (Outcome.FAILED, True, price), (Outcome.FAILED, True, 0.0),
        (Outcome.EXECUTED, True, 0.5)]  # the slot's own cost

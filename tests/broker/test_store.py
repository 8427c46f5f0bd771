"""Contract tests for ``SqlStore`` over SQLite and PostgreSQL (the ``store`` fixture)."""

from __future__ import annotations

import multiprocessing
import queue
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, make_url, select

from broker.catalog import CAPABILITY_NAMES, lookup
from broker.errors import RunBusy, RunNotFound, SlotConflict, StoreError, StoreUnavailable
from broker.identity import Identity, sha256_hex
from broker.migrations import head_revision, upgrade
from broker.models import Base, attempts
from broker.owner import current_owner
from broker.records import (
    AttemptStatus,
    CallClaim,
    RevisionEnd,
    RunStatus,
    SlotRecord,
)
from broker.schema import SCHEMA_HEAD
from broker.sqlstore import SqlStore

RUN = "run-1"
IDENT = Identity("orchestrate/#0", (0, 3), 0)


def slot(identity: Identity = IDENT, *, digest: str = "d1", capability: str = "llm.text",
         revision: int = 1, result: object = None) -> SlotRecord:
    return SlotRecord(run_id=RUN, identity=identity, capability=capability, digest=digest,
                      fingerprint="fp", result={"text": "hi"} if result is None else result,
                      usage={"tokens": 3}, cost=0.5, revision=revision)


def claim(store: SqlStore, identity: Identity = IDENT, owner: str = "w1", *,
          sent: bool = True, revision: int = 1) -> SimpleNamespace:
    """Claim one call (a wave of one of a running revision); ``sent``: and take it, as its
    request leaves (its dispatch record). ``attempt`` is the claimed attempt, the one in
    the way, or the committed one."""
    decided = begin_wave(store, [CallClaim(identity, "llm.text", "d1", check_ledger=False)],
                         revision=revision, owner=owner)[0]
    if decided.claimed and sent:
        assert store.take_attempt(decided.attempt.id, owner)
    attempt = decided.attempt
    if attempt is None or (decided.claimed and sent):
        attempt = store.latest_attempt(RUN, identity)
    return SimpleNamespace(claimed=decided.claimed, attempt=attempt)


def run_parallel(count: int, fn):
    barrier = threading.Barrier(count)

    def call(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(call, range(count)))


# ---- runs and revisions ---------------------------------------------------------------------


def test_runs_and_revision_numbering(store):
    first = store.ensure_run(RUN)
    again = store.ensure_run(RUN)
    assert first == again and first.status is RunStatus.RUNNING
    assert first.created_at.tzinfo is not None and first.created_at.utcoffset() == timedelta(0)
    numbers = []
    for i in range(3):
        numbers.append(store.add_revision(RUN, f"src {i}", f"h{i}"))
        with pytest.raises(RunBusy) as busy:  # one revision of a run runs at a time
            store.add_revision(RUN, "another", "h")
        assert f"revision {numbers[-1]} still running (owner {current_owner()})" in \
            busy.value.message
        store.finish_revision(RUN, numbers[-1], "failed", {})
    assert numbers == [1, 2, 3]
    store.finish_revision(RUN, 2, "succeeded", {"calls": 4})
    rev = store.get_revision(RUN, 2)
    assert (rev.source_text, rev.source_digest, rev.status, rev.summary) == (
        "src 1", "h1", "succeeded", {"calls": 4})
    assert store.get_revision(RUN, 1).summary == {}
    assert store.get_revision(RUN, 9) is None
    assert [r.revision for r in store.list_revisions(RUN)] == [1, 2, 3]
    store.set_run_status(RUN, RunStatus.BLOCKED, "attempt unresolved")
    run = store.get_run(RUN)
    assert (run.status, run.detail, run.revisions) == (RunStatus.BLOCKED, "attempt unresolved", 3)
    assert store.get_run("nope") is None
    assert [r.run_id for r in store.list_runs()] == [RUN]
    with pytest.raises(RunNotFound):
        store.set_run_status("nope", RunStatus.FAILED)
    with pytest.raises(RunNotFound):
        store.add_revision("nope", "src", "h")
    with pytest.raises(RunNotFound):
        store.finish_revision(RUN, 9, "failed", {})


def test_concurrent_submits_number_one_revision_and_refuse_the_others(store):
    store.ensure_run(RUN)

    def submit(i: int) -> int | str:
        try:
            return store.add_revision(RUN, f"src {i}", f"h{i}")
        except RunBusy:
            return "busy"

    outcomes = run_parallel(10, submit)
    assert sorted(outcomes, key=str) == [1] + ["busy"] * 9
    assert store.get_run(RUN).revisions == 1


# ---- slots ----------------------------------------------------------------------------------


def test_commit_is_idempotent_and_conflicts_are_typed(store):
    stored = store.commit(slot(), None)
    assert stored.result == {"text": "hi"} and stored.usage == {"tokens": 3}
    assert stored.committed_at.tzinfo is not None
    again = store.commit(slot(result={"text": "other"}), None)
    assert again == stored  # the first commit wins; the prefix only grows
    with pytest.raises(SlotConflict) as info:
        store.commit(slot(digest="d2"), None)
    assert info.value.identity == str(IDENT)
    with pytest.raises(SlotConflict):
        store.commit(slot(capability="image.generate"), None)
    assert store.get_slot(RUN, IDENT) == stored
    assert store.get_slot(RUN, Identity("other/#0", (), 0)) is None


def test_commit_settles_the_attempt(store):
    won = claim(store).attempt
    stored = store.commit(slot(), won.id)
    assert stored == store.get_slot(RUN, IDENT)  # what the commit answers is what is stored
    assert store.list_attempts(RUN)[0].status is AttemptStatus.SUCCEEDED
    assert store.commit(slot(), won.id) == stored  # a redelivered commit changes nothing
    assert store.list_attempts(RUN)[0].status is AttemptStatus.SUCCEEDED

    other = Identity("other/#0", (), 0)
    late = claim(store, other).attempt
    store.commit(slot(other), None)  # another result was committed there meanwhile
    with pytest.raises(SlotConflict):
        store.commit(slot(other, digest="d2"), late.id)
    failed = store.list_attempts(RUN, frozenset({AttemptStatus.FAILED}))
    assert [a.id for a in failed] == [late.id]
    assert failed[0].error["code"] == "slot_conflict"


def test_list_slots_orders_by_identity(store):
    idents = [Identity("b/#0", (), 0), Identity("a/#0", (10,), 0), Identity("a/#0", (2,), 1),
              Identity("a/#0", (2,), 0)]
    for ident in idents:
        store.commit(slot(ident), None)
    assert [s.identity for s in store.list_slots(RUN)] == sorted(idents)
    assert Identity("a/#0", (), 0) < Identity("a/#0", (0,), 0)


# ---- attempts -------------------------------------------------------------------------------


def test_claim_is_atomic_across_threads(store):
    claims = run_parallel(10, lambda i: claim(store, owner=f"w{i}"))
    assert sum(c.claimed for c in claims) == 1
    assert len({c.attempt.id for c in claims}) == 1
    assert len(store.list_attempts(RUN)) == 1


def _claim_in_process(url: str, owner: str, barrier, results) -> None:
    try:
        barrier.wait(timeout=60)  # open together: concurrent migrations must be safe
        store = SqlStore.open(url)
        try:
            barrier.wait(timeout=60)
            got = claim(store, owner=owner)
            results.put((owner, got.claimed, got.attempt.id))
        finally:
            store.close()
    except BaseException as exc:
        barrier.abort()  # release the sibling at once instead of letting it wait
        results.put((owner, None, f"{type(exc).__name__}: {exc}"))
        raise


def _collect(procs, results, deadline_s: float = 180) -> list:
    """Gather one result per process; stop early when every process has exited."""
    outcomes: list = []
    deadline = time.monotonic() + deadline_s
    while len(outcomes) < len(procs) and time.monotonic() < deadline:
        try:
            outcomes.append(results.get(timeout=1))
        except queue.Empty:
            if not any(proc.is_alive() for proc in procs) and results.empty():
                break
    return outcomes


def test_claim_is_atomic_across_processes(store_url):
    opened = SqlStore.open(store_url)
    opened.ensure_run(RUN)
    opened.add_revision(RUN, "# src", "h")
    opened.close()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_claim_in_process, args=(store_url, f"p{i}", barrier, results))
             for i in range(2)]
    for proc in procs:
        proc.start()
    outcomes = _collect(procs, results)
    for proc in procs:
        proc.join(timeout=60)
    assert [proc.exitcode for proc in procs] == [0, 0], outcomes
    assert len(outcomes) == 2 and all(claimed is not None for _, claimed, _ in outcomes), outcomes
    assert sorted(claimed for _, claimed, _ in outcomes) == [False, True]
    assert len({attempt_id for *_, attempt_id in outcomes}) == 1


def test_claim_is_durable_before_it_returns(store, store_url):
    won = claim(store)
    assert won.claimed and won.attempt.number == 0
    assert won.attempt.status is AttemptStatus.PENDING
    second = SqlStore.open(store_url)
    try:
        assert second.list_attempts(RUN) == [won.attempt]
    finally:
        second.close()


def begin(store: SqlStore, identity: Identity, *, budget=None, payload: bytes | None = None,
          capability: str = "llm.text", digest: str = "d1", revision: int = 1):
    return begin_wave(store, [CallClaim(identity, capability, digest, payload=payload)],
                      budget=budget, revision=revision)[0]


_numbering = threading.Lock()  # parallel claims of one revision number it once


def begin_wave(store: SqlStore, claims: list[CallClaim], *, budget=None, revision: int = 1,
               owner: str = "w1"):
    with _numbering:
        store.ensure_run(RUN)
        while len(store.list_revisions(RUN)) < revision:  # a running revision claims
            for running in store.list_revisions(RUN):  # one at a time: end the earlier one
                if running.status == "running":
                    store.finish_revision(RUN, running.revision, "failed", {})
            store.add_revision(RUN, "# src", "h")
    return store.begin_calls(RUN, revision, owner, claims, budget=budget,
                             price_of=lambda name: lookup(name).unit_price
                             if name in CAPABILITY_NAMES else 0.5)


def test_begin_call_stores_the_payload_in_the_claim_transaction(store):
    store.ensure_run(RUN)
    data = b'{"prompt":"x"}'
    first = begin(store, IDENT, payload=data)
    assert first.claimed and store.get_blobs(RUN, [sha256_hex(data)]) == {sha256_hex(data): data}
    again = begin(store, IDENT, payload=data)  # the open attempt is in the way: no claim
    assert not again.claimed and again.attempt.id == first.attempt.id
    assert len(store.list_attempts(RUN)) == 1


def test_a_wave_is_claimed_whole_or_not_at_all(store):
    """One transaction decides a wave: every call claimed, or none when any call stops
    (a semantic repeat, the budget, a divergence) or finds an open attempt in the way."""
    store.ensure_run(RUN)
    wave = [CallClaim(Identity("orchestrate/#0", (i,), 0), "llm.text", f"d{i}")
            for i in range(4)]
    claimed = begin_wave(store, wave)
    assert [b.claimed for b in claimed] == [True] * 4
    assert len({b.attempt.id for b in claimed}) == 4
    store.commit(slot(wave[0].identity, digest="d0"), claimed[0].attempt.id)
    store.finish_revision(RUN, 1, "failed", {})

    # Revision 2 repeats d0 at a new identity: the repeat stops the wave, nothing claimed.
    fresh = [CallClaim(Identity("orchestrate/#1", (i,), 0), "llm.text", f"n{i}")
             for i in range(3)]
    repeat = CallClaim(Identity("orchestrate/#2", (), 0), "llm.text", "d0")
    refused = begin_wave(store, [*fresh, repeat], revision=2)
    assert refused[-1].repeat is not None and refused[-1].repeat.identity == wave[0].identity
    assert not any(b.claimed or b.attempt for b in refused[:-1])
    budget = begin_wave(store, fresh, revision=2,
                        budget=lambda capability, calls, spent: "over" if calls >= 6 else None)
    assert [b.over_budget for b in budget] == [None, None, "over"]
    diverged = begin_wave(store, [*fresh, CallClaim(wave[0].identity, "llm.text", "other")],
                          revision=2)
    assert diverged[-1].stops("llm.text", "other") and not any(b.claimed for b in diverged)
    in_the_way = begin_wave(store, [*fresh, wave[1]], revision=2)  # revision 1's open attempt
    assert in_the_way[-1].in_the_way and not any(b.claimed for b in in_the_way)
    assert len(store.list_attempts(RUN)) == 4  # none of revision 2's waves claimed anything
    decided = begin_wave(store, [*fresh, CallClaim(wave[0].identity, "llm.text", "d0")],
                         revision=2)
    assert [b.claimed for b in decided] == [True, True, True, False]
    assert decided[-1].slot is not None and decided[-1].slot.digest == "d0"  # a replay


def test_a_finished_revision_claims_nothing_and_a_failed_call_is_answered_again(store):
    store.ensure_run(RUN)
    first = begin(store, IDENT)
    store.fail_attempt(first.attempt.id, {"code": "capability_error", "message": "size"})
    again = begin(store, IDENT)  # the same revision asks again (a redelivered job)
    assert not again.claimed and again.failed is not None
    assert again.failed.error["message"] == "size"
    store.finish_revision(RUN, 1, "failed", {})
    late = begin(store, Identity("orchestrate/#9", (), 0))
    assert late.stale == "failed" and not late.claimed
    assert begin(store, IDENT, revision=2).claimed  # a new revision may retry the call
    assert [a.number for a in store.list_attempts(RUN)] == [0, 1]


def test_one_request_is_paid_once_in_a_revision_in_flight_or_uncertain(store):
    """The ledger counts this revision too: a committed slot, an attempt in flight, an
    uncertain attempt (the provider may have charged) and another call of the same wave
    all make the same request at another identity a semantic repeat."""
    store.ensure_run(RUN)
    at = [Identity("orchestrate/#0", (), i) for i in range(6)]
    first = begin(store, at[0], digest="p")
    assert begin(store, at[1], digest="p").repeat.why == "in flight"
    store.fail_attempt(first.attempt.id, {"code": "capability_error"}, uncertain=True)
    assert store.list_attempts(RUN)[0].status is AttemptStatus.UNCERTAIN
    maybe = begin(store, at[1], digest="p")
    assert maybe.repeat.why == "may have been charged" and maybe.repeat.identity == at[0]
    # A provider that deduplicates by key answers the same request under its key: retried.
    retried = begin_wave(store, [CallClaim(at[1], "llm.text", "p", dedupes=True)])[0]
    assert retried.claimed and retried.attempt.idempotency_key == first.attempt.idempotency_key
    store.commit(slot(at[1], digest="p"), retried.attempt.id)
    assert begin(store, at[2], digest="p").repeat.why == "committed"
    twins = begin_wave(store, [CallClaim(at[3], "llm.text", "q"),
                               CallClaim(at[4], "llm.text", "q")])
    assert twins[1].repeat.why == "in flight" and twins[1].repeat.identity == at[3]
    assert not twins[0].claimed  # the wave claims nothing
    # Under a policy that lets repeats pay (warn/off), they pay.
    allowed = begin_wave(store, [CallClaim(at[5], "llm.text", "p", check_ledger=False)])[0]
    assert allowed.claimed


def test_keys_name_the_request_and_a_run_token_never_the_run_id(store, tmp_path):
    store.ensure_run(RUN)
    one = begin(store, Identity("orchestrate/#0", (), 0), digest="a")
    other = begin(store, Identity("orchestrate/#0", (), 1), digest="b")
    assert one.attempt.idempotency_key != other.attempt.idempotency_key
    elsewhere = SqlStore.open(f"sqlite:///{tmp_path / 'other.db'}")
    try:  # another deployment, the same run id and request: another key
        elsewhere.ensure_run(RUN)
        elsewhere.add_revision(RUN, "# src", "h")
        theirs = elsewhere.begin_calls(RUN, 1, "w", [CallClaim(
            Identity("orchestrate/#0", (), 0), "llm.text", "a")], budget=None,
            price_of=lambda name: 0.0)[0]
    finally:
        elsewhere.close()
    assert theirs.claimed and theirs.attempt.idempotency_key != one.attempt.idempotency_key


def test_an_uncertain_attempt_stops_a_later_revision_unless_the_provider_dedupes(store):
    store.ensure_run(RUN)
    first = begin(store, IDENT, digest="p")
    store.fail_attempt(first.attempt.id, {"code": "capability_error"}, uncertain=True)
    assert begin(store, IDENT, digest="p").failed is not None  # the same revision: answered
    store.finish_revision(RUN, 1, "failed", {})
    blocked = begin(store, IDENT, digest="p", revision=2)
    assert blocked.in_the_way and blocked.attempt.status is AttemptStatus.UNCERTAIN
    changed = begin(store, IDENT, digest="other", revision=2)  # another request: its own key
    assert changed.claimed
    assert changed.attempt.idempotency_key != first.attempt.idempotency_key


def test_a_further_take_of_a_paid_payload_needs_an_approval_in_a_repair(store):
    store.ensure_run(RUN)
    first = begin(store, IDENT, digest="take1")
    store.commit(slot(IDENT, digest="take1"), first.attempt.id)
    store.finish_revision(RUN, 1, "failed", {})
    second = Identity("orchestrate/#1", (), 0)
    refused = begin_wave(store, [CallClaim(second, "llm.text", "take2",
                                           lower_takes=("take1",))], revision=2)[0]
    assert refused.take is not None and refused.take.identity == IDENT
    approved = begin_wave(store, [CallClaim(second, "llm.text", "take2", lower_takes=(
        "take1",), take_approved=True)], revision=2)[0]
    assert approved.claimed


def test_budget_holds_across_concurrent_deciders(store):
    """Every decider counts the run's attempts under the run's lock: 12 parallel calls on
    a budget of 3 claim exactly 3 (without the lock PostgreSQL lets them overspend)."""
    store.ensure_run(RUN)

    def refusal(capability: str, calls: int, spent: float) -> str | None:
        time.sleep(0.02)  # widen the window between the count and the claim
        return "over" if calls + 1 > 3 else None

    begins = run_parallel(12, lambda i: begin(store, Identity("orchestrate/#0", (i,), 0),
                                              digest=f"d{i}", budget=refusal))
    assert sum(b.claimed for b in begins) == 3
    assert sum(b.over_budget is not None for b in begins) == 9
    assert len(store.list_attempts(RUN)) == 3


def _images_within(store, images: float):
    """Claims of image calls ``i`` under a max_cost of ``images`` images' price."""
    from broker.catalog import lookup
    from broker.claim import budget_check
    from broker.envelope import Budget

    store.ensure_run(RUN)
    check = budget_check(Budget(max_cost=round(images * lookup("image.generate").unit_price,
                                                6)))

    def decide(i: int):
        return begin(store, Identity("orchestrate/#0", (i,), 0), capability="image.generate",
                     digest=f"d{i}", budget=check)
    return decide


def test_cost_budget_holds_across_concurrent_deciders(store):
    """The broker's own budget check (``max_cost``) under the same lock: 10 parallel image
    calls on a budget of three images claim exactly three."""
    begins = run_parallel(10, _images_within(store, 3.5))
    assert sum(b.claimed for b in begins) == 3
    assert all("max_cost" in b.over_budget for b in begins if not b.claimed)


def test_a_refusal_the_provider_did_not_charge_for_costs_no_budget(store):
    """The budget's spend is the report's: a free refusal (``charged: no``) is an attempt
    (max_calls) but costs nothing (max_cost); a maybe-charged failure costs its price."""
    from broker.claim import budget_check
    from broker.envelope import Budget

    decide = _images_within(store, 1.5)
    refused = decide(0)
    store.fail_attempt(refused.attempt.id, {"code": "invalid_request", "charged": "no"})
    maybe = decide(1)
    assert maybe.claimed, maybe.over_budget
    store.fail_attempt(maybe.attempt.id, {"code": "provider_error", "charged": "maybe"},
                       uncertain=True)
    over = decide(2)
    assert not over.claimed and "max_cost" in over.over_budget
    calls = budget_check(Budget(max_calls=2))
    assert "max_calls" in begin(store, Identity("orchestrate/#0", (3,), 0),
                                digest="d3", budget=calls).over_budget


def test_failed_attempt_can_be_claimed_again(store):
    first = claim(store).attempt
    blocked = claim(store, owner="w2")
    assert not blocked.claimed and blocked.attempt == first
    store.fail_attempt(first.id, {"code": "capability_error", "message": "boom"})
    failed = store.list_attempts(RUN)[0]
    assert failed.status is AttemptStatus.FAILED and failed.error["message"] == "boom"
    again = claim(store, owner="w2")  # the same revision gets the same answer again
    assert not again.claimed and again.attempt.status is AttemptStatus.FAILED
    retry = claim(store, owner="w2", revision=2)  # a later revision may try once more
    assert retry.claimed and retry.attempt.number == 1 and retry.attempt.owner == "w2"
    with pytest.raises(StoreError):
        store.fail_attempt(999_999, {})


def test_committed_attempt_is_not_claimed_again(store):
    """A duplicate delivery that lost the race must replay, never dispatch again."""
    first = claim(store).attempt
    store.commit(slot(), first.id)
    late = claim(store, owner="w2")
    assert not late.claimed
    assert late.attempt.status is AttemptStatus.SUCCEEDED


def test_heartbeats_renew_only_the_attempts_they_name(store):
    stale = claim(store, Identity("a/#0", (), 0)).attempt
    fresh = claim(store, Identity("b/#0", (), 0)).attempt
    cutoff = datetime.now(UTC) + timedelta(milliseconds=1)
    while datetime.now(UTC) <= cutoff:  # a fast claim can land inside that millisecond
        time.sleep(0.001)
    store.heartbeat_attempts([fresh.id, stale.id + 10_000])  # an unknown id is no error
    beats = {a.id: a.heartbeat_at for a in store.list_attempts(RUN)}
    assert beats[fresh.id] >= cutoff > beats[stale.id]


def test_resolve_attempt_abandon_permits_one_retry(store):
    first = claim(store).attempt
    store.resolve_attempt(first.id, AttemptStatus.UNRESOLVED, operator="revise",
                          reason="its owner is gone")
    done = store.resolve_attempt(first.id, AttemptStatus.ABANDONED, operator="ops",
                                 reason="provider never saw it")
    assert done.status is AttemptStatus.ABANDONED
    retry = claim(store)
    assert retry.claimed and retry.attempt.number == 1
    with pytest.raises(StoreError, match="abandoned"):
        store.resolve_attempt(first.id, AttemptStatus.ABANDONED, operator="ops", reason="again")
    with pytest.raises(StoreError, match="does not exist"):
        store.resolve_attempt(999_999, AttemptStatus.ABANDONED, operator="ops", reason="x")


def test_resolve_attempt_writes_back_the_known_result(store):
    first = claim(store).attempt
    with pytest.raises(StoreError):
        store.resolve_attempt(first.id, AttemptStatus.RESOLVED, operator="ops", reason="no slot")
    done = store.resolve_attempt(first.id, AttemptStatus.RESOLVED, operator="ops",
                                 reason="seen in provider log", slot=slot())
    assert done.status is AttemptStatus.RESOLVED
    assert store.get_slot(RUN, IDENT).result == {"text": "hi"}
    with pytest.raises(StoreError, match="resolved"):
        store.resolve_attempt(first.id, AttemptStatus.ABANDONED, operator="ops", reason="x")


def test_resolve_attempt_can_declare_a_pending_attempt_unresolved(store):
    first = claim(store).attempt
    marked = store.resolve_attempt(first.id, AttemptStatus.UNRESOLVED, operator="reconciler",
                                   reason="owner process is gone")
    assert marked.status is AttemptStatus.UNRESOLVED
    with pytest.raises(StoreError, match="is unresolved; only pending"):
        store.resolve_attempt(first.id, AttemptStatus.UNRESOLVED, operator="r2", reason="x")
    with pytest.raises(StoreError):
        store.resolve_attempt(first.id, AttemptStatus.FAILED, operator="ops", reason="x")


def test_resolve_with_conflicting_slot_changes_nothing(store):
    attempt = claim(store).attempt
    store.commit(slot(), None)
    with pytest.raises(SlotConflict):
        store.resolve_attempt(attempt.id, AttemptStatus.RESOLVED, operator="ops", reason="x",
                              slot=slot(digest="d2"))
    assert store.list_attempts(RUN)[0].status is AttemptStatus.PENDING


# ---- audit ----------------------------------------------------------------------------------


def test_certificates_orphans_and_events_round_trip(store):
    assert store.latest_certificate(RUN) is None
    store.save_certificate(RUN, 1, "c1", [{"identity": "a@:0", "h": "x"}])
    store.save_certificate(RUN, 2, "c2", [])
    store.save_certificate(RUN, 2, "c2b", [{"identity": "b@:0"}])
    cert = store.latest_certificate(RUN)
    assert (cert.revision, cert.digest, cert.entries) == (2, "c2b", [{"identity": "b@:0"}])
    assert cert.created_at.tzinfo is not None

    gone = (Identity("a/#0", (), 0), Identity("b/#0", (1,), 2))
    for revision, left in ((2, gone), (2, gone), (3, ())):  # a second end adds none again
        store.end_revision(RevisionEnd(
            run_id=RUN, revision=revision, status="succeeded", summary={},
            run_status=RunStatus.SUCCEEDED, detail=None, certificate_digest=f"c{revision}",
            certificate_entries=(), orphans=left))
    orphans = store.list_orphans(RUN)
    assert [(o["revision"], o["identity"], o["policy"]) for o in orphans] == [
        (2, "a/#0@:0", "warn"), (2, "b/#0@1:2", "warn")]

    store.add_event(RUN, "revision_started", "go")
    store.add_event(RUN, "replay", "hit", revision=2, identity=IDENT, data={"n": 1})
    first, second = store.list_events(RUN)
    assert (first.kind, first.revision, first.identity, first.data) == (
        "revision_started", None, None, None)
    assert (second.revision, second.identity, second.data) == (2, str(IDENT), {"n": 1})
    assert first.id < second.id and second.created_at.tzinfo is not None


def test_text_from_outside_with_a_nul_is_stored_and_the_revision_ends(store):
    # PostgreSQL text refuses NUL; a script's error message may hold one (chr(0)), and
    # the revision's end transaction that carries it must not fail.
    store.ensure_run(RUN)
    revision = store.add_revision(RUN, "src", "h")
    attempt = claim(store, owner=current_owner(), revision=revision).attempt
    store.resolve_attempt(attempt.id, AttemptStatus.UNRESOLVED, operator="ops",
                          reason="said \x00 so")
    store.end_revision(RevisionEnd(
        run_id=RUN, revision=revision, status="failed", summary={"error": "boom\x00"},
        run_status=RunStatus.FAILED, detail="boom\x00!", certificate_digest="c",
        certificate_entries=(), orphans=(), events=(("revision_finished", "a\x00b", None),)))
    store.add_event(RUN, "note", "\x00")
    assert store.get_run(RUN).detail == "boom\ufffd!"
    assert store.get_revision(RUN, revision).summary == {"error": "boom\x00"}  # JSON keeps it
    assert [e.message for e in store.list_events(RUN)][-2:] == ["a\ufffdb", "\ufffd"]
    with store.engine.connect() as conn:
        assert conn.execute(select(attempts.c.resolved_reason)).scalar_one() == "said \ufffd so"


# ---- failing closed -------------------------------------------------------------------------


def test_unreachable_postgres_is_store_unavailable():
    with pytest.raises(StoreUnavailable) as info:
        SqlStore.open("postgresql+psycopg://revise:s3cret@127.0.0.1:1/revise")
    message = str(info.value)
    assert "127.0.0.1:1" in message and "s3cret" not in message
    assert "check" in message and info.value.code == "store_unavailable"


def test_unwritable_sqlite_path_is_store_unavailable(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    with pytest.raises(StoreUnavailable, match="writable"):
        SqlStore.open(f"sqlite:///{blocker / 'store' / 'revise.db'}")


def test_locked_sqlite_is_store_unavailable(sqlite_url):
    store = SqlStore.open(sqlite_url, busy_timeout_ms=100)
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailable, match="locked"):
            store.ensure_run(RUN)
        holder.execute("ROLLBACK")
        assert store.ensure_run(RUN).run_id == RUN
    finally:
        holder.close()
        store.close()


# ---- schema ---------------------------------------------------------------------------------


def test_migrations_match_the_models(store_url):
    url = make_url(store_url)
    if url.get_backend_name() == "sqlite":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    upgrade(store_url)
    upgrade(store_url)  # idempotent at head
    engine = create_engine(store_url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


@pytest.mark.parametrize("args, envelope", [(b'{"n":1}', b'{"budget":2}'), (b"{}", b"{}"),
                                            (b'{"n":1}', None), (None, None)])
def test_a_revisions_inputs_are_stored_with_it(store, args, envelope):
    store.ensure_run(RUN)
    number = store.add_revision(RUN, "src", "h", args=args, envelope=envelope)
    record = store.get_revision(RUN, number)
    named = {digest: data for digest, data in ((record.args_digest, args),
                                                (record.envelope_digest, envelope))
             if data is not None}
    assert [record.args_digest is None, record.envelope_digest is None] == [
        args is None, envelope is None]
    assert store.get_blobs(RUN, list(named)) == named


def test_the_schema_head_is_the_migrations_head():
    assert SCHEMA_HEAD == head_revision()


def test_a_store_at_head_opens_without_alembic(store_url):
    """A process opening a store already at head (every worker start but the first after
    an upgrade) reads its version with one query and never imports Alembic."""
    SqlStore.open(store_url).close()  # migrated here
    probe = ("import sys\n"
             "from broker.sqlstore import SqlStore\n"
             f"SqlStore.open({store_url!r}).close()\n"
             "print('alembic' in sys.modules, 'pygments' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    assert done.stdout.split() == ["False", "False"]

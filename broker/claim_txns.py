"""The claim of a wave and the life of a claimed attempt, inside the caller's transaction.

``begin_calls_txn`` decides and claims the new calls of one wave (the side that asks
runs it, ``broker.claim``). A claimed attempt is pending, owned by the asker and not
yet sent; ``claimed_calls_txn`` reads such attempts back with their payloads (a broker
worker executes from the store alone); ``take_attempt_txn`` is the dispatch record,
written just before the request leaves, which is also the atomic "this copy sends
it": a duplicate task, a withdrawn attempt (the revision stopped) or one abandoned
as never sent (its asker died) is never taken. ``withdraw_unsent_txn`` takes back
what a stopped revision claimed and nobody sent.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Callable, Collection, Sequence
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Connection, and_, case, func, select, update

from broker import models
from broker import statements as sql
from broker.calls import ClaimedCall
from broker.identity import Identity, request_key, sha256_hex
from broker.models import (
    attempt_record,
    attempts,
    identity_of,
    runs,
    slot_record,
    slots,
)
from broker.records import (
    COMMITTED_ATTEMPT_STATUSES,
    OPEN_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    Begin,
    CallClaim,
    PaidAt,
    RevisionStatus,
    SlotRecord,
)
from broker.revision_txns import put_blob_txn

BudgetCheck = Callable[[str, int, float], "str | None"]


class WaveRefused(Exception):
    """Raised inside the claim transaction to roll it back; carries the decisions."""

    def __init__(self, decisions: list[Begin]) -> None:
        super().__init__("the wave claims nothing")
        self.decisions = decisions


def begin_calls_txn(conn: Connection, run_id: str, revision: int, owner: str,
                    claims: Sequence[CallClaim], *, budget: BudgetCheck | None,
                    price_of: Callable[[str], float]) -> list[Begin]:
    """Decide and record the calls of one wave in one transaction: for each, committed
    already? an attempt of it in the way? paid (or maybe paid) anywhere in the run, this
    revision and this wave included? a further take nobody approved? within budget? else
    claim the next attempt under the request's key and store the payload blob.

    A wave is claimed whole or not at all: when any of its calls stops (a divergence, a
    semantic repeat, an unapproved take, the budget) or finds an attempt in the way,
    ``WaveRefused`` rolls the transaction back and nothing is claimed, so a stop anywhere
    in a wave dispatches none of it. A revision that is no longer running (finished, or
    lost and failed by the reconciler) claims nothing either: a late delivery never spends.

    The run's row is locked first (PostgreSQL; SQLite writers hold the database lock),
    so concurrent deciders of one run go one after the other and can never spend past
    the budget, or pay one request twice, together.
    """
    head = conn.execute(sql.revision_head(conn.dialect.name),
                        {"run_id": run_id, "revision": revision}).first()
    if head is None or head.status != RevisionStatus.RUNNING:
        return [Begin(stale=head.status if head is not None else "missing")] * len(claims)
    token = head.token or _new_run_token(conn, run_id)
    calls, cost = _spent_txn(conn, run_id, price_of) if budget is not None else (0, 0.0)
    decisions: list[Begin] = []
    for claim in claims:
        facts = conn.execute(sql.CALL_FACTS_DEDUPED if claim.dedupes else sql.CALL_FACTS,
                             sql.at(claim.identity, run_id) | {
                                 "capability": claim.capability, "digest": claim.digest}).one()
        begin = _decided_txn(conn, run_id, revision, claim, facts)
        if begin is None and budget is not None:
            refusal = budget(claim.capability, calls, cost)
            begin = None if refusal is None else Begin(over_budget=refusal)
        if begin is None:
            begin = Begin(claimed=True, attempt=_insert_attempt_txn(
                conn, run_id, revision, owner, claim, _key_of(token, claim, facts),
                0 if facts.latest_id is None else facts.latest_number + 1))
            calls, cost = calls + 1, cost + price_of(claim.capability)
        decisions.append(begin)
    if any(d.in_the_way or d.stops(c.capability, c.digest)
           for d, c in zip(decisions, claims, strict=True)):
        raise WaveRefused([Begin() if d.claimed else d for d in decisions])
    return decisions


def _key_of(token: str, claim: CallClaim, facts: Any) -> str:
    """The request's idempotency key: the one its identity asked it under before, whatever
    the ledger policy says now (a retry after an unknown outcome must be deduplicated by
    a provider that honours keys); else ``request_key``'s."""
    if facts.latest_digest == claim.digest and facts.latest_idempotency_key:
        return str(facts.latest_idempotency_key)
    return request_key(token, claim.capability, claim.digest,
                       None if claim.check_ledger else claim.identity)


def _decided_txn(conn: Connection, run_id: str, revision: int, claim: CallClaim,
                 facts: Any) -> Begin | None:
    """What stands in the way of claiming ``claim`` (None: nothing does); ``facts`` is its
    row of ``CALL_FACTS``."""
    if facts.slot_id is not None and facts.slot_here:
        return Begin(slot=_slot_by_id(conn, facts.slot_id))
    own = _own_attempt(conn, revision, claim, facts)
    if own is not None:
        return own
    if not claim.check_ledger:
        return None
    if facts.slot_id is not None:
        twin = _slot_by_id(conn, facts.slot_id)
        return Begin(repeat=PaidAt(twin.identity, twin.revision, "committed", twin.line))
    if facts.paid_status is not None:
        return Begin(repeat=PaidAt(
            identity_of(SimpleNamespace(site=facts.paid_site, path=facts.paid_path,
                                        occurrence=facts.paid_occurrence)),
            facts.paid_revision, "in flight" if facts.paid_status == AttemptStatus.PENDING.value
            else "may have been charged"))
    if claim.lower_takes and not claim.take_approved and revision > 1:
        request = sql.at(claim.identity, run_id) | {"capability": claim.capability,
                                                    "digest": claim.digest}
        row = conn.execute(sql.LOWER_TAKE_PAID, {
            "run_id": run_id, "capability": claim.capability,
            "digests": list(claim.lower_takes), "revision": revision}).first()
        if row is not None and conn.execute(sql.TAKE_ASKED_BEFORE, request | {
                "revision": revision}).first() is None:
            paid_slot = slot_record(row)
            return Begin(take=PaidAt(paid_slot.identity, paid_slot.revision, "committed",
                                     paid_slot.line))
    return None


def _slot_by_id(conn: Connection, slot_id: int) -> SlotRecord:
    return slot_record(conn.execute(sql.SLOT_BY_ID, {"id": slot_id}).one())


def _new_run_token(conn: Connection, run_id: str) -> str:
    """A run row the migration left without a token gets one now, once."""
    conn.execute(update(runs).where(runs.c.run_id == run_id, runs.c.token.is_(None))
                 .values(token=secrets.token_hex(16)))
    return str(conn.execute(sql.RUN_TOKEN, {"run_id": run_id}).scalar())


def _own_attempt(conn: Connection, revision: int, claim: CallClaim, facts: Any
                 ) -> Begin | None:
    """The identity's own latest attempt, when it decides the call. Read whole, and decided
    on as read then: a concurrent copy may have settled it since ``facts``."""
    if facts.latest_id is None or facts.latest_status == AttemptStatus.ABANDONED.value:
        return None
    latest = attempt_record(conn.execute(sql.ATTEMPT_BY_ID, {"id": facts.latest_id}).one())
    if latest.status in COMMITTED_ATTEMPT_STATUSES:  # its slot was committed with it
        row = conn.execute(sql.SLOT_AT, sql.at(claim.identity, latest.run_id)).first()
        return Begin(slot=slot_record(row)) if row is not None else Begin(attempt=latest)
    if latest.status in OPEN_ATTEMPT_STATUSES:
        return Begin(attempt=latest)
    answered = latest.status in (AttemptStatus.FAILED, AttemptStatus.UNCERTAIN)
    if answered and latest.revision == revision:
        return Begin(failed=latest)  # a redelivery: the same answer again
    if (latest.status is AttemptStatus.UNCERTAIN and latest.digest == claim.digest
            and claim.check_ledger and not claim.dedupes):
        return Begin(attempt=latest)  # maybe paid: an operator decides
    return None


def _spent_txn(conn: Connection, run_id: str, price_of: Callable[[str], float]
               ) -> tuple[int, float]:
    """Provider dispatch attempts of the run so far, and their cost (withdrawn ones,
    which never left, are neither): the report's spend, ``broker.charging.counts_as_paid``,
    so a refusal the provider did not charge for costs nothing here either."""
    free = and_(attempts.c.status == AttemptStatus.FAILED.value,
                attempts.c.error["charged"].as_string() == "no")
    spent = conn.execute(select(
        attempts.c.capability, func.count(), func.sum(case((free, 0), else_=1))).where(
        attempts.c.run_id == run_id, ~_withdrawn()).group_by(attempts.c.capability)).all()
    return (sum(n for _, n, _ in spent),
            sum(price_of(name) * paid for name, _, paid in spent))


def _withdrawn() -> Any:
    return and_(attempts.c.status == AttemptStatus.ABANDONED.value,
                attempts.c.sent_at.is_(None))


def latest_attempt_txn(conn: Connection, run_id: str, identity: Identity) -> Any:
    return conn.execute(sql.LATEST_ATTEMPT, sql.at(identity, run_id)).first()


def _insert_attempt_txn(conn: Connection, run_id: str, revision: int, owner: str,
                        claim: CallClaim, idempotency_key: str, number: int
                        ) -> AttemptRecord:
    """Insert the identity's attempt ``number`` (0: its first), and its payload blob."""
    now = models.utcnow()
    record = AttemptRecord(
        id=0, run_id=run_id, identity=claim.identity, capability=claim.capability,
        digest=claim.digest, revision=revision, number=number,
        status=AttemptStatus.PENDING, owner=owner, created_at=now, heartbeat_at=now,
        idempotency_key=idempotency_key, take=claim.take, fingerprint=claim.fingerprint,
        chain_fingerprint=claim.chain_fingerprint, line=claim.line)
    values = sql.at(claim.identity, run_id) | {
        "number": number, "capability": claim.capability, "digest": claim.digest,
        "revision": revision, "status": record.status.value, "owner": owner,
        "idempotency_key": idempotency_key, "error": None, "created_at": now,
        "heartbeat_at": now, "take": claim.take, "fingerprint": claim.fingerprint or None,
        "chain_fingerprint": claim.chain_fingerprint or None, "line": claim.line}
    statement = sql.INSERT_ATTEMPT
    if claim.payload is not None and conn.dialect.name == "postgresql":
        statement = sql.INSERT_ATTEMPT_AND_BLOB
        values |= {"blob_digest": sha256_hex(claim.payload), "blob_kind": "payload",
                   "blob_data": claim.payload}
    elif claim.payload is not None:
        put_blob_txn(conn, run_id, "payload", claim.payload)
    return dataclasses.replace(record, id=conn.execute(statement, values).scalar_one())


# ---- claimed attempts: read back, taken, withdrawn ----------------------------------------


def claimed_calls_txn(conn: Connection, run_id: str, revision: int, ids: Collection[int]
                      ) -> list[ClaimedCall]:
    """The pending, never sent attempts among ``ids`` of the revision, with their payloads.
    Anything else named (another run's, settled, sent, withdrawn, unknown) is left out:
    a queue message only points at what the store recorded."""
    rows = conn.execute(sql.CLAIMED_CALLS, {"ids": list(ids), "run_id": run_id,
                                             "revision": revision}).all()
    return [ClaimedCall(record, payload_of(bytes(row.data), record.take))
            for row in rows for record in (attempt_record(row),)]


def payload_of(blob: bytes, take: int) -> Any:
    """The normalized payload inside a payload blob (``broker.identity.call_bytes``)."""
    value = json.loads(blob)
    return value if take == 1 else value["payload"]


def take_attempt_txn(conn: Connection, attempt_id: int, owner: str) -> bool:
    """The dispatch record: ``owner`` sends the attempt's request now. True for exactly
    one caller, and only while the attempt is pending, unsent and its revision running."""
    done = conn.execute(sql.TAKE_ATTEMPT, {"attempt_id": attempt_id, "taker": owner,
                                           "now": models.utcnow()})
    return done.rowcount > 0


def withdraw_unsent_txn(conn: Connection, run_id: str, revision: int, owner: str,
                        reason: str) -> list[int]:
    """Abandon the revision's attempts ``owner`` claimed and nobody sent (nothing was
    paid); the ids withdrawn."""
    rows = conn.execute(update(attempts).where(
        attempts.c.run_id == run_id, attempts.c.revision == revision,
        attempts.c.owner == owner, attempts.c.status == AttemptStatus.PENDING.value,
        attempts.c.sent_at.is_(None))
        .values(status=AttemptStatus.ABANDONED.value, resolved_by="revise",
                resolved_reason=reason, resolved_at=models.utcnow())
        .returning(attempts.c.id)).all()
    return [row.id for row in rows]


def settled_txn(conn: Connection, run_id: str, ids: Collection[int]
                ) -> list[tuple[AttemptRecord, SlotRecord | None]]:
    """The attempts ``ids`` of the run as they stand, each with its slot once committed
    (one read)."""
    rows = conn.execute(sql.SETTLED, {"run_id": run_id, "ids": list(ids)}).all()
    return [(attempt_record(row), None if row.slot_id is None else slot_record(
        SimpleNamespace(**{c.name: getattr(row, f"slot_{c.name}") for c in slots.c})))
        for row in rows]

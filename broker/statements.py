"""The run store's statements on the path of every call and every job, built once with
bind parameters.

Building a SQLAlchemy statement (its expressions, then its cache key) costs more
than executing it, and these run for every call (claim, commit, heartbeat) or every
job (admission, a revision's start and end). They are built at import and executed
with a parameter dict; the ones that differ by dialect (ON CONFLICT, FOR UPDATE) are
built once per dialect. An UPDATE's bind parameters cannot take its table's column
names (they would set those columns), so theirs are named otherwise.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    case,
    func,
    insert,
    literal,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from broker.identity import Identity
from broker.models import attempts, blobs, certificates, events, jobs, revisions, runs, slots
from broker.records import (
    COMMITTED_ATTEMPT_STATUSES,
    OPEN_ATTEMPT_STATUSES,
    AttemptStatus,
    JobStatus,
    RevisionStatus,
)

SLOT_KEY = ["run_id", "site", "path", "occurrence"]
OPEN = [s.value for s in OPEN_ATTEMPT_STATUSES]


def at(identity: Identity, run_id: str) -> dict[str, Any]:
    """The parameters naming one identity of a run."""
    return {"run_id": run_id, "site": identity.site, "path": identity.path_text,
            "occurrence": identity.occurrence}


def _at(table: Table) -> Any:
    return ((table.c.run_id == bindparam("run_id")) & (table.c.site == bindparam("site"))
            & (table.c.path == bindparam("path"))
            & (table.c.occurrence == bindparam("occurrence")))


SLOT_AT = select(slots).where(_at(slots))
SLOTS_OF_RUN = select(slots).where(slots.c.run_id == bindparam("run_id"))  # the prefix
ATTEMPTS_OF_REVISION = (select(attempts).where(attempts.c.run_id == bindparam("run_id"),
                                               attempts.c.revision == bindparam("revision"))
                        .order_by(attempts.c.id))
LATEST_ATTEMPT = (select(attempts).where(_at(attempts)).order_by(attempts.c.number.desc())
                  .limit(1))
# The slot at the identity first, else a slot elsewhere in the run with the same call
# (the paid-payload ledger, every revision including this one): one read for both.
_PAID_ELSEWHERE = ((slots.c.run_id == bindparam("run_id"))
                   & (slots.c.capability == bindparam("capability"))
                   & (slots.c.digest == bindparam("digest")))
SLOT_OR_PAID = (select(slots).where(_at(slots) | _PAID_ELSEWHERE)
                .order_by(case((_at(slots), 0), else_=1)).limit(1))


def _call_facts(paid_statuses: list[str]) -> Any:
    """What decides a new call, in one read of one snapshot, narrow (a new call reads no
    more): the identity's latest attempt (``latest_<column>``), the slot at it or else a
    paid twin's (``slot_here`` tells which) and an attempt at another identity with the same
    request in one of ``paid_statuses`` (``paid_<column>``), each NULL when none. The rare
    decisions read their whole row by id."""
    latest = LATEST_ATTEMPT.with_only_columns(
        attempts.c.id, attempts.c.number, attempts.c.status, attempts.c.digest,
        attempts.c.idempotency_key).subquery("latest")
    slot = SLOT_OR_PAID.with_only_columns(
        slots.c.id, case((_at(slots), True), else_=False).label("here")).subquery("slot")
    paid = (select(attempts.c.site, attempts.c.path, attempts.c.occurrence,
                   attempts.c.revision, attempts.c.status)
            .where(attempts.c.run_id == bindparam("run_id"),
                   attempts.c.capability == bindparam("capability"),
                   attempts.c.digest == bindparam("digest"),
                   or_(*(attempts.c.status == status for status in paid_statuses)),
                   ~_at(attempts))
            .order_by(attempts.c.id).limit(1).subquery("paid"))
    one_row = select(literal(1).label("one")).subquery("one_row")
    return (select(*(c.label(f"{sub.name}_{c.name}") for sub in (latest, slot, paid)
                     for c in sub.c))
            .select_from(one_row.outerjoin(latest, true()).outerjoin(slot, true())
                         .outerjoin(paid, true())))


# A request deduplicated by its provider is paid twice only while one copy is in flight;
# any other also when an answer may have been charged, or nobody knows.
CALL_FACTS = _call_facts([AttemptStatus.PENDING.value, AttemptStatus.UNCERTAIN.value,
                          AttemptStatus.UNRESOLVED.value])
CALL_FACTS_DEDUPED = _call_facts([AttemptStatus.PENDING.value])
SLOT_BY_ID = select(slots).where(slots.c.id == bindparam("id"))
ATTEMPT_BY_ID = select(attempts).where(attempts.c.id == bindparam("id"))
# A lower take of the payload committed by an earlier revision (a further take needs an
# approval), and whether an earlier revision already asked for this very take.
LOWER_TAKE_PAID = (
    select(slots).where(slots.c.run_id == bindparam("run_id"),
                        slots.c.capability == bindparam("capability"),
                        slots.c.digest.in_(bindparam("digests", expanding=True)),
                        slots.c.revision < bindparam("revision"))
    .order_by(slots.c.id).limit(1))
TAKE_ASKED_BEFORE = (
    select(attempts.c.id).where(attempts.c.run_id == bindparam("run_id"),
                                attempts.c.capability == bindparam("capability"),
                                attempts.c.digest == bindparam("digest"),
                                attempts.c.revision < bindparam("revision")).limit(1))
RUN_TOKEN = select(runs.c.token).where(runs.c.run_id == bindparam("run_id"))
INSERT_ATTEMPT = insert(attempts).returning(attempts.c.id)
_ATTEMPT_VALUES = {c.name: bindparam(c.name) for c in attempts.c if c.name in (
    "run_id", "site", "path", "occurrence", "number", "capability", "digest", "revision",
    "status", "owner", "idempotency_key", "error", "created_at", "heartbeat_at", "take",
    "fingerprint", "chain_fingerprint", "line")}
# PostgreSQL: the claimed attempt and its payload blob (once per digest) in one statement.
INSERT_ATTEMPT_AND_BLOB = (
    insert(attempts).values(_ATTEMPT_VALUES).returning(attempts.c.id)
    .add_cte(postgresql.insert(blobs).values(
        run_id=bindparam("run_id"), digest=bindparam("blob_digest"),
        kind=bindparam("blob_kind"), data=bindparam("blob_data"),
        created_at=bindparam("created_at"))
        .on_conflict_do_nothing(index_elements=["run_id", "digest"]).cte("payload_blob")))
SUCCEED_ATTEMPT = (update(attempts)
                   .where(attempts.c.id == bindparam("attempt_id"), attempts.c.status.in_(OPEN))
                   .values(status=AttemptStatus.SUCCEEDED.value,
                           answered_at=bindparam("now")))
# Its parameters are named slot_<column>: an UPDATE given parameters named as its table's
# columns would set those columns too.
_SLOT_VALUES = {c.name: bindparam(f"slot_{c.name}") for c in slots.c if c.name != "id"}
_NEW_SLOT = (postgresql.insert(slots).values(_SLOT_VALUES)
             .on_conflict_do_nothing(index_elements=SLOT_KEY).returning(slots.c.id)
             .cte("new_slot"))
# PostgreSQL: a paid result's slot and its attempt settled, in one statement, when the slot
# is new (the common case); it names the new slot's id, else NULL and changes nothing (the
# identity has a slot: the commit transaction reads it and decides). Parameters: slot_<column>
# for the slot, attempt_id and now.
COMMIT_NEW_SLOT = select(_NEW_SLOT.c.id).add_cte(
    update(attempts)
    .where(attempts.c.id == bindparam("attempt_id"), attempts.c.status.in_(OPEN),
           select(_NEW_SLOT.c.id).exists())
    .values(status=AttemptStatus.SUCCEEDED.value, answered_at=bindparam("now"))
    .returning(attempts.c.id).cte("settled"))
CONFLICTED_ATTEMPT = (update(attempts)
                      .where(attempts.c.id == bindparam("attempt_id"),
                             attempts.c.status.in_(OPEN))
                      .values(status=AttemptStatus.FAILED.value, error=bindparam("error")))
HEARTBEAT = (update(attempts)
             .where(attempts.c.id.in_(bindparam("ids", expanding=True)),
                    attempts.c.status == AttemptStatus.PENDING.value)
             .values(heartbeat_at=bindparam("now")))
# The same, for the attempts still owned by one process (its token is their prefix).
HEARTBEAT_OWNED = HEARTBEAT.where(
    func.substr(attempts.c.owner, 1, func.length(bindparam("owner_prefix")))
    == bindparam("owner_prefix"))

# The claimed calls a capability task names, with their payloads: pending, never sent,
# of that run and revision (anything else a message names is left out).
CLAIMED_CALLS = (
    select(attempts, blobs.c.data)
    .join(blobs, (blobs.c.run_id == attempts.c.run_id) & (blobs.c.digest == attempts.c.digest))
    .where(attempts.c.id.in_(bindparam("ids", expanding=True)),
           attempts.c.run_id == bindparam("run_id"),
           attempts.c.revision == bindparam("revision"),
           attempts.c.status == AttemptStatus.PENDING.value, attempts.c.sent_at.is_(None))
    .order_by(attempts.c.id))
# The dispatch record: the attempt is taken by one sender, only while pending, unsent and
# its revision running.
_REVISION_RUNNING = select(revisions.c.revision).where(
    revisions.c.run_id == attempts.c.run_id, revisions.c.revision == attempts.c.revision,
    revisions.c.status == RevisionStatus.RUNNING.value).exists()
TAKE_ATTEMPT = (update(attempts)
                .where(attempts.c.id == bindparam("attempt_id"),
                       attempts.c.status == AttemptStatus.PENDING.value,
                       attempts.c.sent_at.is_(None), _REVISION_RUNNING)
                .values(sent_at=bindparam("now"), owner=bindparam("taker"),
                        heartbeat_at=bindparam("now")))
# Attempts as they stand, each with its slot once committed; the slot's columns are
# labelled ``slot_<name>``.
SETTLED = (
    select(attempts, *(c.label(f"slot_{c.name}") for c in slots.c))
    .outerjoin(slots, attempts.c.status.in_([s.value for s in COMMITTED_ATTEMPT_STATUSES])
               & (slots.c.run_id == attempts.c.run_id) & (slots.c.site == attempts.c.site)
               & (slots.c.path == attempts.c.path)
               & (slots.c.occurrence == attempts.c.occurrence))
    .where(attempts.c.run_id == bindparam("run_id"),
           attempts.c.id.in_(bindparam("ids", expanding=True))))

# The revision's parked job accepted again, when none of its attempts is pending (an
# UPDATE's bind parameters cannot take its columns' names).
WAKE_PARKED = (
    update(jobs)
    .where(jobs.c.run_id == bindparam("parked_run"),
           jobs.c.revision == bindparam("parked_revision"),
           jobs.c.status == JobStatus.PARKED.value,
           ~select(attempts.c.id).where(attempts.c.run_id == bindparam("parked_run"),
                                        attempts.c.revision == bindparam("parked_revision"),
                                        attempts.c.status == AttemptStatus.PENDING.value)
           .exists())
    .values(status=JobStatus.ACCEPTED.value, updated_at=bindparam("now"),
            resumes=func.coalesce(jobs.c.resumes, 0) + 1)
    .returning(*jobs.c))


# ---- a job's admission, its revision's start and end -----------------------------------

RUN_BY_ID = select(runs).where(runs.c.run_id == bindparam("run_id"))
JOB_BY_ID = select(jobs).where(jobs.c.job_id == bindparam("job_id"))
REVISION_BY_NUMBER = select(revisions).where(revisions.c.run_id == bindparam("run_id"),
                                             revisions.c.revision == bindparam("revision"))
BLOBS = select(blobs.c.digest, blobs.c.data).where(
    blobs.c.run_id == bindparam("run_id"),
    blobs.c.digest.in_(bindparam("digests", expanding=True)))
INSERT_EVENT = insert(events)
INSERT_REVISION = insert(revisions)
# Touching the run locks its row on PostgreSQL: numbering is serialized per run.
TOUCH_RUN = update(runs).where(runs.c.run_id == bindparam("run")).values(
    updated_at=bindparam("now"))
REVISION_NUMBERS = select(
    func.max(revisions.c.revision).label("latest"),
    func.max(case((revisions.c.status == RevisionStatus.RUNNING, revisions.c.revision)))
    .label("running")).where(revisions.c.run_id == bindparam("run_id"))
RUN_REVISIONS = update(runs).where(runs.c.run_id == bindparam("run")).values(
    revisions=bindparam("latest"))
# Job ``job`` waits for, or runs, its start number ``start_number``: touched when its
# revision starts, finished when it fails at its start.
_STARTABLE = [JobStatus.ACCEPTED.value, JobStatus.STARTED.value]
_AT_START = (jobs.c.job_id == bindparam("job"),
             func.coalesce(jobs.c.resumes, 0) == bindparam("start_number"),
             jobs.c.status.in_(_STARTABLE))
JOB_AT_START = update(jobs).where(*_AT_START).values(updated_at=bindparam("now"))
JOB_FAILS_AT_START = (update(jobs).where(*_AT_START)
                      .values(status=JobStatus.FINISHED.value, updated_at=bindparam("now"))
                      .returning(jobs.c.run_id, jobs.c.revision))
JOB_STARTED = (update(jobs).where(jobs.c.job_id == bindparam("job"), jobs.c.status.in_(_STARTABLE))
               .values(status=JobStatus.STARTED.value, updated_at=bindparam("now")))
JOB_FINISHED = update(jobs).where(jobs.c.job_id == bindparam("job")).values(
    status=JobStatus.FINISHED.value, updated_at=bindparam("now"))
_REVISION = ((revisions.c.run_id == bindparam("run"))
             & (revisions.c.revision == bindparam("number")))
OWN_REVISION = (update(revisions).where(_REVISION, revisions.c.status == RevisionStatus.RUNNING)
                .values(owner=bindparam("lease_owner"), heartbeat_at=bindparam("now")))
REVISION_ENDS = update(revisions).where(_REVISION).values(
    status=bindparam("revision_status"), summary=bindparam("report"))
RUN_STATUS = update(runs).where(runs.c.run_id == bindparam("run")).values(
    status=bindparam("run_status"), detail=bindparam("run_detail"), updated_at=bindparam("now"))


def _dialect(name: str) -> Any:
    return postgresql if name == "postgresql" else sqlite


def upsert(conn: Connection, table: Table) -> Any:
    """The connection's dialect's INSERT, which knows ON CONFLICT."""
    return _dialect(conn.dialect.name).insert(table)


@cache
def revision_head(dialect: str) -> Any:
    """The revision's status and its run's token (the secret half of its request keys),
    locking the run's row on PostgreSQL (SQLite writers hold the database lock already):
    concurrent deciders of one run go one after the other."""
    query = select(revisions.c.status, runs.c.token).join(
        runs, runs.c.run_id == revisions.c.run_id).where(
        revisions.c.run_id == bindparam("run_id"), revisions.c.revision == bindparam("revision"))
    return query.with_for_update(of=runs) if dialect == "postgresql" else query


@cache
def insert_blob(dialect: str) -> Any:
    return _dialect(dialect).insert(blobs).on_conflict_do_nothing(
        index_elements=["run_id", "digest"])


@cache
def insert_slot(dialect: str) -> Any:
    """Insert a slot unless its identity has one; returns the id it inserted (no row: the
    identity had one)."""
    return _dialect(dialect).insert(slots).on_conflict_do_nothing(
        index_elements=SLOT_KEY).returning(slots.c.id)


@cache
def insert_run(dialect: str) -> Any:
    """Create a run unless it exists; returns the row it created (no row: it existed)."""
    return _dialect(dialect).insert(runs).on_conflict_do_nothing(
        index_elements=["run_id"]).returning(*runs.c)


@cache
def insert_job(dialect: str) -> Any:
    """Accept a job unless its id was accepted; returns the row it created."""
    return _dialect(dialect).insert(jobs).on_conflict_do_nothing(
        index_elements=["job_id"]).returning(*jobs.c)


@cache
def save_certificate(dialect: str) -> Any:
    """A revision's certificate, replacing one saved before for that revision."""
    cert = _dialect(dialect).insert(certificates)
    return cert.on_conflict_do_update(
        index_elements=["run_id", "revision"],
        set_={"digest": cert.excluded.digest, "entries": cert.excluded.entries,
              "created_at": cert.excluded.created_at})

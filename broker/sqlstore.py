"""``RunStore`` on SQLAlchemy Core: SQLite in embedded mode, PostgreSQL in a deployment.

Idempotency lives in the database. Writers are ``*_txn(conn, ...)`` functions
that run inside the caller's transaction; ``SqlStore`` opens one transaction
per decision, retries the few writers whose race is settled by a unique key,
and turns connectivity failures into ``StoreUnavailable`` (fail closed).
"""

from __future__ import annotations

import dataclasses
import json
import random
import secrets
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
    func,
    make_url,
    select,
    update,
)
from sqlalchemy.engine import URL
from sqlalchemy.exc import (
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
)

from broker import models
from broker import statements as sql
from broker.calls import ClaimedCall
from broker.claim_txns import (
    BudgetCheck,
    WaveRefused,
    begin_calls_txn,
    claimed_calls_txn,
    latest_attempt_txn,
    settled_txn,
    take_attempt_txn,
    withdraw_unsent_txn,
)
from broker.errors import (
    RunBusy,
    RunNotFound,
    SchemaNotReady,
    SlotConflict,
    StoreError,
    StoreUnavailable,
)
from broker.identity import Identity
from broker.models import (
    attempt_record,
    attempts,
    certificates,
    events,
    job_record,
    jobs,
    orphans,
    revision_record,
    revisions,
    run_record,
    runs,
    slot_record,
)
from broker.names import validate_name
from broker.outage import describe, where
from broker.owner import current_owner
from broker.records import (
    OPEN_ATTEMPT_STATUSES,
    RECONCILABLE_ATTEMPT_STATUSES,
    AttemptEvent,
    AttemptRecord,
    AttemptStatus,
    Begin,
    CallClaim,
    CertificateRecord,
    EventRecord,
    JobRecord,
    JobStatus,
    RevisionEnd,
    RevisionRecord,
    RevisionStatus,
    RunRecord,
    RunStatus,
    SlotRecord,
)
from broker.revision_txns import (
    add_event_txn,
    end_revision_txn,
    fail_job_revision_txn,
    fail_run_txn,
    put_blobs_txn,
    revision_facts_txn,
    save_certificate_txn,
    slots_txn,
    start_revision_txn,
)
from broker.schema import SCHEMA_HEAD, known_revisions, store_mark, stored_revision

T = TypeVar("T")


_OPEN = [s.value for s in OPEN_ATTEMPT_STATUSES]
_RECONCILABLE = [s.value for s in RECONCILABLE_ATTEMPT_STATUSES]
_TRANSIENT = {"40001", "40P01"}  # serialization failure, deadlock detected
_TRANSIENT_RETRIES = 3


# ---- writers inside the caller's transaction ------------------------------------------------


def ensure_run_txn(conn: Connection, run_id: str) -> RunRecord:
    # The last line of defence: a run id becomes a directory and queue keys, so no
    # run is ever created under a name that could escape the runs directory.
    validate_name("run id", run_id)
    now = models.utcnow()
    created = conn.execute(sql.insert_run(conn.dialect.name), {
        "run_id": run_id, "status": RunStatus.RUNNING.value, "revisions": 0,
        "created_at": now, "updated_at": now, "token": secrets.token_hex(16)}).first()
    return run_record(created if created is not None else conn.execute(
        sql.RUN_BY_ID, {"run_id": run_id}).one())


def add_revision_txn(conn: Connection, run_id: str, source_text: str, source_digest: str,
                     args: bytes | None = None, envelope: bytes | None = None,
                     owner: str | None = None) -> int:
    """Number the next revision; its inputs (canonical JSON bytes) are stored with it."""
    now = models.utcnow()
    # Touching the run first locks its row on PostgreSQL, which serializes
    # numbering per run; the primary key (run_id, revision) is the backstop.
    touched = conn.execute(sql.TOUCH_RUN, {"run": run_id, "now": now})
    if touched.rowcount == 0:
        raise RunNotFound(f"run {run_id!r} does not exist; create it first", run_id=run_id)
    facts = conn.execute(sql.REVISION_NUMBERS, {"run_id": run_id}).one()
    if facts.running is not None:
        running = conn.execute(sql.REVISION_BY_NUMBER,
                               {"run_id": run_id, "revision": facts.running}).first()
        owner_now = None if running is None else running.owner
        raise RunBusy(
            f"run {run_id!r} has revision {facts.running} still running (owner "
            f"{owner_now or 'unknown'}); one revision of a run runs at a time, so that two "
            f"never pay for the same call. Wait for it (`revise show {run_id}` shows it "
            "running until it ends) and submit again; a revision whose runner died is failed "
            "once its lease expires",
            run_id=run_id, revision=facts.running)
    number = (facts.latest or 0) + 1
    inputs = {kind: data for kind, data in (("args", args), ("envelope", envelope))
              if data is not None}
    digests = put_blobs_txn(conn, run_id, inputs) if inputs else {}
    args_digest, envelope_digest = digests.get("args"), digests.get("envelope")
    conn.execute(sql.INSERT_REVISION, {
        "run_id": run_id, "revision": number, "source_text": source_text,
        "source_digest": source_digest, "status": RevisionStatus.RUNNING.value,
        "summary": None, "created_at": now, "args_digest": args_digest,
        "envelope_digest": envelope_digest, "owner": owner, "heartbeat_at": now})
    conn.execute(sql.RUN_REVISIONS, {"run": run_id, "latest": number})
    return number


def accept_job_txn(conn: Connection, job_id: str, run_id: str, revision: int,
                   message: dict[str, Any]) -> JobRecord:
    now = models.utcnow()
    created = conn.execute(sql.insert_job(conn.dialect.name), {
        "job_id": job_id, "run_id": run_id, "revision": revision,
        "status": JobStatus.ACCEPTED.value, "message": message, "requeues": 0, "resumes": 0,
        "created_at": now, "updated_at": now}).first()
    return job_record(created if created is not None else conn.execute(
        sql.JOB_BY_ID, {"job_id": job_id}).one())


def commit_slot_txn(conn: Connection, slot: SlotRecord, attempt_id: int | None) -> SlotRecord:
    """Insert the slot unless one exists; return the stored one and settle the attempt.

    A stored slot for a different call marks the attempt failed (the caller
    raises ``SlotConflict`` after the transaction commits).
    """
    values = _slot_values(slot)
    inserted = conn.execute(sql.insert_slot(conn.dialect.name), values).first()
    stored = (_as_stored(slot, values) if inserted is not None else
              slot_record(conn.execute(sql.SLOT_AT, sql.at(slot.identity, slot.run_id)).one()))
    if attempt_id is not None:
        if stored.same_call(slot.capability, slot.digest):
            conn.execute(sql.SUCCEED_ATTEMPT, {"attempt_id": attempt_id,
                                               "now": models.utcnow()})
        else:
            conn.execute(sql.CONFLICTED_ATTEMPT, {"attempt_id": attempt_id, "error": {
                "code": SlotConflict.code, "message": _conflict_text(stored)}})
    return stored


def _slot_values(slot: SlotRecord) -> dict[str, Any]:
    return sql.at(slot.identity, slot.run_id) | {
        "capability": slot.capability, "digest": slot.digest, "fingerprint": slot.fingerprint,
        "chain_fingerprint": slot.chain_fingerprint or None, "line": slot.line,
        "result": slot.result, "usage": dict(slot.usage), "cost": float(slot.cost),
        "revision": slot.revision, "committed_at": slot.committed_at or models.utcnow()}


def _as_stored(slot: SlotRecord, values: dict[str, Any]) -> SlotRecord:
    """The slot inserted with ``values``, as a read gives it back (JSON columns hold JSON's
    values)."""
    return dataclasses.replace(slot, committed_at=values["committed_at"],
                               result=json.loads(json.dumps(slot.result)),
                               usage=json.loads(json.dumps(values["usage"])))


class _Reconnect(Exception):
    """The transaction's connection was dropped before anything was committed."""


def resolve_attempt_txn(conn: Connection, attempt_id: int, status: AttemptStatus, operator: str,
                        reason: str, slot: SlotRecord | None,
                        event_of: AttemptEvent | None = None) -> AttemptRecord:
    if status not in (AttemptStatus.ABANDONED, AttemptStatus.RESOLVED,
                      AttemptStatus.UNRESOLVED):
        raise StoreError(f"an attempt is resolved as abandoned, resolved or unresolved, "
                         f"not {status}")
    if (status is AttemptStatus.RESOLVED) != (slot is not None):
        raise StoreError("pass the known result slot exactly when resolving as 'resolved'")
    # Unresolved is the detector's verdict on a pending attempt; the operator's
    # decisions (abandoned, resolved) close a pending, unresolved or uncertain one.
    allowed = ((AttemptStatus.PENDING.value,) if status is AttemptStatus.UNRESOLVED
               else _RECONCILABLE)
    row = conn.execute(
        update(attempts).where(attempts.c.id == attempt_id, attempts.c.status.in_(allowed))
        .values(status=status.value, resolved_by=operator, resolved_reason=reason,
                resolved_at=models.utcnow()).returning(*attempts.c)
    ).first()
    if row is None:
        current = conn.execute(select(attempts.c.status)
                               .where(attempts.c.id == attempt_id)).scalar()
        if current is None:
            raise StoreError(f"attempt {attempt_id} does not exist", attempt_id=attempt_id)
        raise StoreError(f"attempt {attempt_id} is {current}; only {' or '.join(allowed)} "
                         f"attempts can become {status.value}", attempt_id=attempt_id,
                         status=current)
    record = attempt_record(row)
    if slot is not None:
        if (slot.run_id, slot.identity) != (record.run_id, record.identity):
            raise StoreError(f"slot {slot.identity} does not belong to attempt {attempt_id} "
                             f"({record.identity})", identity=record.identity)
        stored = commit_slot_txn(conn, slot, None)
        if not stored.same_call(slot.capability, slot.digest):
            raise SlotConflict(_conflict_text(stored), identity=slot.identity)
    if event_of is not None:
        kind, message, data = event_of(record)
        add_event_txn(conn, record.run_id, kind, message, revision=record.revision,
                      identity=record.identity, data=data)
    return record


def _conflict_text(stored: SlotRecord) -> str:
    return (f"{stored.identity} is already committed as {stored.capability} with digest "
            f"{stored.digest[:12]}; a different call cannot be committed there")


# ---- the store ------------------------------------------------------------------------------


class SqlStore:
    """The run store over one SQLAlchemy engine. Open it with ``SqlStore.open(url)``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._safe_url = engine.url.render_as_string(hide_password=True)
        self.available_since: datetime | None = None
        self._away = False

    @classmethod
    def open(cls, url: str, *, busy_timeout_ms: int = 30_000, migrate: bool = True
             ) -> SqlStore:
        """Create the engine and bring the schema to head (safe from several processes).
        ``migrate=False`` (read-only commands) never writes: a schema that is not at head
        is a ``StoreError`` naming the fix."""
        parsed = make_url(url)
        try:
            engine = _create_engine(parsed, busy_timeout_ms)
        except OSError as exc:
            safe = parsed.render_as_string(hide_password=True)
            raise StoreUnavailable(f"run store {safe} is unavailable: cannot create its "
                                   f"directory ({exc}); check that the path is writable",
                                   url=safe) from exc
        store = cls(engine)
        try:
            with store._translated("reading the schema version"):
                found = stored_revision(engine)
            _refuse_ahead(found, parsed.render_as_string(hide_password=True))
            if found != SCHEMA_HEAD and migrate:
                from broker.migrations import upgrade  # Alembic, only when the schema moves

                with store._translated("migrating the schema"):
                    upgrade(engine)
            elif not migrate:
                _require_head(found, parsed.render_as_string(hide_password=True))
        except BaseException:
            engine.dispose()
            raise
        return store

    def close(self) -> None:
        self.engine.dispose()

    def mark(self) -> str | None:
        """Which database this store is (``broker.schema.store_mark``)."""
        with self._translated("reading which database this is"):
            return store_mark(self.engine)

    @property
    def shown_url(self) -> str:
        return self._safe_url

    # -- plumbing --

    def _run(self, action: str, fn: Callable[[Connection], T], *, write: bool = True,
             race_retries: int = 0, alone: bool = False) -> T:
        """Run ``fn`` in one transaction, retrying when a unique key settled a race.

        PostgreSQL deadlock and serialization failures roll the whole
        transaction back, so they are retried a few times as well. ``alone``: ``fn`` runs
        one statement, which on PostgreSQL is its own transaction (no BEGIN and COMMIT
        around it: two round trips fewer, on the path of every call). Such a statement
        may have committed when its connection broke, so each one given ``alone`` is safe
        to run again: a read, an idempotent update, a take or wake that finds itself done
        and answers False or None (fail closed: the attempt is then unresolved, the job
        requeued by the sweep), or a new slot's commit that finds the slot stored (the
        commit transaction then reads it and decides).
        """
        reconnected = False
        options: dict[str, Any] = {"revise_write": write}
        if alone and self.engine.dialect.name == "postgresql":
            options["isolation_level"] = "AUTOCOMMIT"
        with self._translated(action):
            for attempt in range(max(race_retries, _TRANSIENT_RETRIES) + 1):
                try:
                    with self.engine.connect() as conn:
                        conn.execution_options(**options)
                        with conn.begin():
                            try:
                                result = fn(conn)
                            except DBAPIError as exc:
                                # A pooled connection the server dropped (a restart) fails
                                # its first statement; nothing was committed, so once on a
                                # fresh connection is safe. (No ping before every checkout:
                                # that is a round trip per transaction.)
                                if not exc.connection_invalidated or reconnected:
                                    raise
                                reconnected = True
                                raise _Reconnect() from exc
                    if self._away:
                        self._away = False
                        self.available_since = datetime.now(UTC)
                    return result
                except _Reconnect:
                    continue
                except IntegrityError:
                    if attempt >= race_retries:
                        raise
                except OperationalError as exc:
                    if _sqlstate(exc) not in _TRANSIENT or attempt >= _TRANSIENT_RETRIES:
                        raise
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))
        raise AssertionError("unreachable")

    @contextmanager
    def _translated(self, action: str) -> Iterator[None]:
        """Connectivity failures become ``StoreUnavailable``; other driver errors ``StoreError``."""
        try:
            yield
        except (OperationalError, InterfaceError) as exc:
            self._away = True
            raise self._unavailable(action, exc) from exc
        except DBAPIError as exc:
            if exc.connection_invalidated:
                self._away = True
                raise self._unavailable(action, exc) from exc
            raise StoreError(f"{action} failed: {_reason(exc)}") from exc

    def _unavailable(self, action: str, exc: Exception) -> StoreUnavailable:
        if self.engine.dialect.name == "sqlite":
            check = ("check that the file's directory exists and is writable and that no other "
                     "process holds a long write lock")
        else:
            check = ("check that the database server is running and reachable at that host "
                     "and port, and that the user and database exist")
        service, host, port, _ = where(self._safe_url)
        return StoreUnavailable(f"the run store ({describe(self._safe_url)}) is unavailable "
                                f"while {action} ({_reason(exc)}); {check}", url=self._safe_url,
                                service=service, host=host, port=port)

    # -- runs and revisions --

    def ensure_run(self, run_id: str) -> RunRecord:
        validate_name("run id", run_id)  # before connecting: a bad name is not an outage
        return self._run("creating a run", lambda c: ensure_run_txn(c, run_id))

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._run("reading a run", lambda c: c.execute(
            sql.RUN_BY_ID, {"run_id": run_id}).first(), write=False, alone=True)
        return None if row is None else run_record(row)

    def list_runs(self, limit: int = 50) -> list[RunRecord]:
        rows = self._run("listing runs", lambda c: c.execute(
            select(runs).order_by(runs.c.updated_at.desc(), runs.c.run_id).limit(limit)).all(),
            write=False, alone=True)
        return [run_record(r) for r in rows]

    def set_run_status(self, run_id: str, status: RunStatus, detail: str | None = None) -> None:
        result = self._run("setting a run status", lambda c: c.execute(sql.RUN_STATUS, {
            "run": run_id, "run_status": RunStatus(status).value, "run_detail": detail,
            "now": models.utcnow()}), alone=True)
        if result.rowcount == 0:
            raise RunNotFound(f"run {run_id!r} does not exist", run_id=run_id)

    def open_run(self, run_id: str) -> list[SlotRecord]:
        """Create the run unless it exists, and read its committed prefix."""
        validate_name("run id", run_id)  # before connecting: a bad name is not an outage
        def txn(conn: Connection) -> list[SlotRecord]:
            ensure_run_txn(conn, run_id)
            return slots_txn(conn, run_id)

        return self._run("opening a run", txn)

    def add_revision(self, run_id: str, source_text: str, source_digest: str, *,
                     args: bytes | None = None, envelope: bytes | None = None,
                     job: Callable[[int], tuple[str, dict[str, Any]]] | None = None) -> int:
        """Number the next revision; its lease starts now, held by this process.

        ``job(number)`` gives the accepted job (id, sandbox message) of a revision the
        dispatcher queues: recorded in the same transaction, with its ``queued`` event."""
        owner = current_owner()

        def txn(conn: Connection) -> int:
            number = add_revision_txn(conn, run_id, source_text, source_digest, args,
                                      envelope, owner)
            if job is not None:
                job_id, message = job(number)
                accept_job_txn(conn, job_id, run_id, number, message)
                add_event_txn(conn, run_id, "queued",
                              f"revision {number} queued for a sandbox worker",
                              revision=number, data={"job_id": job_id})
            return number

        return self._run("adding a revision", txn, race_retries=50)

    def finish_revision(self, run_id: str, revision: int, status: str,
                        summary: dict[str, Any]) -> None:
        result = self._run("finishing a revision", lambda c: c.execute(
            update(revisions).where(revisions.c.run_id == run_id,
                                    revisions.c.revision == revision)
            .values(status=str(status), summary=summary)), alone=True)
        if result.rowcount == 0:
            raise RunNotFound(f"run {run_id!r} has no revision {revision}", run_id=run_id)

    def start_revision(self, run_id: str, revision: int, *, owner: str, job_id: str | None,
                       event: str, admit: Callable[[list[SlotRecord]], bool],
                       resumes: int = 0) -> tuple[list[SlotRecord], bool] | None:
        """A revision starts running (``broker.revision_txns.start_revision_txn``)."""
        return self._run("starting a revision", lambda c: start_revision_txn(
            c, run_id, revision, owner=owner, job_id=job_id, event=event, admit=admit,
            resumes=resumes))

    def revision_facts(self, run_id: str, revision: int
                       ) -> tuple[list[AttemptRecord], list[SlotRecord]]:
        return self._run("reading a finished revision",
                         lambda c: revision_facts_txn(c, run_id, revision), write=False)

    def end_revision(self, end: RevisionEnd) -> None:
        """A revision ends (``broker.revision_txns.end_revision_txn``)."""
        self._run("ending a revision", lambda c: end_revision_txn(c, end))

    def get_revision(self, run_id: str, revision: int) -> RevisionRecord | None:
        row = self._run("reading a revision", lambda c: c.execute(
            sql.REVISION_BY_NUMBER, {"run_id": run_id, "revision": revision}).first(),
            write=False, alone=True)
        return None if row is None else revision_record(row)

    def list_revisions(self, run_id: str) -> list[RevisionRecord]:
        rows = self._run("listing revisions", lambda c: c.execute(select(revisions).where(
            revisions.c.run_id == run_id).order_by(revisions.c.revision)).all(),
            write=False, alone=True)
        return [revision_record(r) for r in rows]

    # -- liveness: revision leases and accepted jobs --

    def heartbeat_revision(self, run_id: str, revision: int, owner: str) -> bool:
        """Renew a running revision's lease for ``owner``; False once it is not running."""
        result = self._run("renewing a revision lease", lambda c: c.execute(
            update(revisions).where(revisions.c.run_id == run_id,
                                    revisions.c.revision == revision,
                                    revisions.c.status == RevisionStatus.RUNNING)
            .values(owner=owner, heartbeat_at=models.utcnow())), alone=True)
        return result.rowcount > 0

    def running_revisions(self, run_id: str | None = None) -> list[RevisionRecord]:
        """Running revisions, of one run or of all."""
        query = select(revisions).where(revisions.c.status == RevisionStatus.RUNNING)
        if run_id is not None:
            query = query.where(revisions.c.run_id == run_id)
        rows = self._run("listing running revisions", lambda c: c.execute(
            query.order_by(revisions.c.created_at)).all(), write=False, alone=True)
        return [revision_record(r) for r in rows]

    def runs_behind(self) -> list[RevisionRecord]:
        """The latest revision of each run still marked ``running`` whose latest revision
        has finished (its runner could not write the run's status after the revision's)."""
        rows = self._run("listing runs behind their revision", lambda c: c.execute(
            select(revisions).join(runs, (runs.c.run_id == revisions.c.run_id)
                                   & (runs.c.revisions == revisions.c.revision))
            .where(runs.c.status == RunStatus.RUNNING.value,
                   revisions.c.status != RevisionStatus.RUNNING)).all(), write=False, alone=True)
        return [revision_record(r) for r in rows]

    def lose_revision(self, run_id: str, revision: int, reason: str, summary: dict[str, Any],
                      *, seen_heartbeat: datetime | None) -> bool:
        """Mark a running revision failed as lost, if its lease is still the one seen
        (nobody renewed it meanwhile); its job is lost and the run failed with the reason
        (a run blocked on an unresolved attempt stays blocked). One transaction."""
        def txn(conn: Connection) -> bool:
            beat = revisions.c.heartbeat_at
            done = conn.execute(update(revisions).where(
                revisions.c.run_id == run_id, revisions.c.revision == revision,
                revisions.c.status == RevisionStatus.RUNNING,
                beat.is_(None) if seen_heartbeat is None else beat == seen_heartbeat)
                .values(status="failed", summary=summary))
            if done.rowcount == 0:
                return False
            now = models.utcnow()
            conn.execute(update(jobs).where(jobs.c.run_id == run_id,
                                            jobs.c.revision == revision)
                         .values(status=JobStatus.LOST.value, updated_at=now))
            fail_run_txn(conn, run_id, revision, reason, now)
            return True

        return self._run("marking a lost revision", txn)

    def fail_job_revision(self, job_id: str, resumes: int, reason: str,
                          summary: dict[str, Any]) -> bool:
        """``broker.revision_txns.fail_job_revision_txn``: False for a stale delivery."""
        return self._run("failing a job's revision", lambda c: fail_job_revision_txn(
            c, job_id, resumes, reason, summary))

    def get_job(self, job_id: str) -> JobRecord | None:
        row = self._run("reading a job", lambda c: c.execute(
            sql.JOB_BY_ID, {"job_id": job_id}).first(), write=False, alone=True)
        return None if row is None else job_record(row)

    def job_for_revision(self, run_id: str, revision: int) -> JobRecord | None:
        row = self._run("reading a job", lambda c: c.execute(
            select(jobs).where(jobs.c.run_id == run_id, jobs.c.revision == revision)
            .order_by(jobs.c.created_at.desc()).limit(1)).first(), write=False, alone=True)
        return None if row is None else job_record(row)

    def list_jobs(self, statuses: frozenset[JobStatus]) -> list[JobRecord]:
        rows = self._run("listing jobs", lambda c: c.execute(
            select(jobs).where(jobs.c.status.in_([JobStatus(s).value for s in statuses]))
            .order_by(jobs.c.created_at)).all(), write=False, alone=True)
        return [job_record(r) for r in rows]

    def park_job(self, job_id: str) -> bool:
        """The started job gives its sandbox back while its calls are in flight."""
        def txn(conn: Connection) -> bool:
            done = conn.execute(update(jobs).where(
                jobs.c.job_id == job_id, jobs.c.status == JobStatus.STARTED.value)
                .values(status=JobStatus.PARKED.value, updated_at=models.utcnow()))
            if done.rowcount == 0:
                return False
            job = job_record(conn.execute(sql.JOB_BY_ID, {"job_id": job_id}).one())
            add_event_txn(conn, job.run_id, "parked", "its calls are in flight: the sandbox "
                          "job gave its slot back and resumes when they are settled",
                          revision=job.revision, data={"job_id": job_id})
            return True

        return self._run("parking a job", txn)

    def wake_parked(self, run_id: str, revision: int) -> JobRecord | None:
        """The revision's parked job, accepted again (one more resume) when none of the
        revision's attempts is still pending; None when it is not parked or still waits.
        One statement, so of two brokers settling its last calls at once one wakes it."""
        def txn(conn: Connection) -> JobRecord | None:
            row = conn.execute(sql.WAKE_PARKED, {
                "parked_run": run_id, "parked_revision": revision,
                "now": models.utcnow()}).first()
            return None if row is None else job_record(row)

        return self._run("waking a parked job", txn, alone=True)

    def resume_lost_job(self, job: JobRecord, why: str) -> JobRecord | None:
        """The started ``job`` as it was read, whose sandbox worker is gone, accepted again
        as its next resume (one more requeue); None when anything of it changed since (a
        delivery started it again: ``start_revision_txn`` touches the row first)."""
        def txn(conn: Connection) -> JobRecord | None:
            row = conn.execute(update(jobs).where(
                jobs.c.job_id == job.job_id, jobs.c.status == JobStatus.STARTED.value,
                func.coalesce(jobs.c.resumes, 0) == job.resumes,
                jobs.c.updated_at == job.updated_at)
                .values(status=JobStatus.ACCEPTED.value, updated_at=models.utcnow(),
                        resumes=job.resumes + 1, requeues=job.requeues + 1)
                .returning(*jobs.c)).first()
            if row is None:
                return None
            add_event_txn(conn, job.run_id, "job_resumed", why, revision=job.revision,
                          data={"job_id": job.job_id, "resumes": job.resumes + 1})
            return job_record(row)

        return self._run("resuming a lost job", txn)

    def requeued_job(self, job_id: str, seen_requeues: int) -> bool:
        """Count one more requeue of an accepted job, if nobody else counted it first."""
        result = self._run("counting a requeue", lambda c: c.execute(update(jobs).where(
            jobs.c.job_id == job_id, jobs.c.status == JobStatus.ACCEPTED.value,
            jobs.c.requeues == seen_requeues).values(requeues=seen_requeues + 1,
                                                     updated_at=models.utcnow())), alone=True)
        return result.rowcount > 0

    # -- blobs (inputs and payloads by digest) --

    def get_blobs(self, run_id: str, digests: Iterable[str]) -> dict[str, bytes]:
        wanted = sorted(set(digests))
        if not wanted:
            return {}
        rows = self._run("reading blobs", lambda c: c.execute(
            sql.BLOBS, {"run_id": run_id, "digests": wanted}).all(), write=False, alone=True)
        return {r.digest: bytes(r.data) for r in rows}

    # -- slots --

    def get_slot(self, run_id: str, identity: Identity) -> SlotRecord | None:
        row = self._run("reading a slot", lambda c: c.execute(
            sql.SLOT_AT, sql.at(identity, run_id)).first(), write=False, alone=True)
        return None if row is None else slot_record(row)

    def list_slots(self, run_id: str) -> list[SlotRecord]:
        return self._run("listing slots", lambda c: slots_txn(c, run_id), write=False)

    # -- attempts --

    def begin_calls(self, run_id: str, revision: int, owner: str,
                    claims: Sequence[CallClaim], *, budget: BudgetCheck | None,
                    price_of: Callable[[str], float]) -> list[Begin]:
        try:
            return self._run("deciding calls", lambda c: begin_calls_txn(
                c, run_id, revision, owner, claims, budget=budget, price_of=price_of),
                race_retries=10)
        except WaveRefused as refused:
            return refused.decisions


    def commit(self, slot: SlotRecord, attempt_id: int | None) -> SlotRecord:
        if attempt_id is not None and self.engine.dialect.name == "postgresql":
            values = _slot_values(slot)
            params = {f"slot_{name}": value for name, value in values.items()} | {
                "attempt_id": attempt_id, "now": models.utcnow()}
            new = self._run("committing a slot", lambda c: c.execute(
                sql.COMMIT_NEW_SLOT, params).scalar(), alone=True)
            if new is not None:
                return _as_stored(slot, values)
        stored = self._run("committing a slot", lambda c: commit_slot_txn(c, slot, attempt_id))
        if not stored.same_call(slot.capability, slot.digest):
            raise SlotConflict(_conflict_text(stored), identity=slot.identity)
        return stored

    def fail_attempt(self, attempt_id: int, error: dict[str, Any], *,
                     uncertain: bool = False) -> None:
        """Mark an open attempt failed, or uncertain when the provider may have charged for
        it (``broker.charging``); an attempt already settled keeps its status."""
        status = AttemptStatus.UNCERTAIN if uncertain else AttemptStatus.FAILED
        self._settle(attempt_id, "failing an attempt", status=status.value, error=error,
                     answered_at=models.utcnow())

    def take_attempt(self, attempt_id: int, owner: str) -> bool:
        """The attempt's request is about to leave for the provider: its dispatch record
        (an operator sees from any host that it may have been paid), and ``owner`` the one
        who sends it. False when it is not pending and unsent (a duplicate took it, it was
        withdrawn or abandoned as never sent) or its revision stopped: then it must not be
        sent."""
        return self._run("recording a dispatch",
                         lambda c: take_attempt_txn(c, attempt_id, owner), alone=True)

    def claimed_calls(self, run_id: str, revision: int, ids: Collection[int]
                      ) -> list[ClaimedCall]:
        return self._run("reading claimed calls", lambda c: claimed_calls_txn(
            c, run_id, revision, ids), write=False, alone=True)

    def withdraw_unsent(self, run_id: str, revision: int, owner: str, reason: str
                        ) -> list[int]:
        return self._run("withdrawing unsent attempts", lambda c: withdraw_unsent_txn(
            c, run_id, revision, owner, reason))

    def settled(self, run_id: str, ids: Collection[int]
                ) -> list[tuple[AttemptRecord, SlotRecord | None]]:
        return self._run("reading attempts", lambda c: settled_txn(c, run_id, ids),
                         write=False, alone=True)

    def abandon_unsent(self, attempt_id: int, *, by: str) -> bool:
        """Abandon a pending attempt whose request never left (no dispatch record): nothing
        can have been paid, so its call may simply run again. Atomic against the owner's
        ``sent_attempt``: exactly one of them wins."""
        def txn(conn: Connection) -> bool:
            row = conn.execute(update(attempts).where(
                attempts.c.id == attempt_id, attempts.c.status == AttemptStatus.PENDING.value,
                attempts.c.sent_at.is_(None)).values(
                    status=AttemptStatus.ABANDONED.value, resolved_by=by,
                    resolved_at=models.utcnow(),
                    resolved_reason="its owner is gone and its request was never sent: "
                    "nothing was paid").returning(*attempts.c)).first()
            if row is None:
                return False
            record = attempt_record(row)
            add_event_txn(conn, record.run_id, "attempt_abandoned", f"attempt "
                          f"#{record.number} at {record.identity} was never sent (its owner "
                          "is gone); the call runs again when the run is resubmitted",
                          revision=record.revision, identity=record.identity,
                          data={"attempt_id": record.id})
            return True

        return self._run("abandoning an unsent attempt", txn)

    def heartbeat_attempts(self, attempt_ids: Collection[int], owner: str | None = None
                           ) -> None:
        """Renew the heartbeat of those of ``attempt_ids`` that are still pending (and, with
        ``owner``, still owned by a token that starts with it: an attempt a broker took
        from its asker is the broker's to renew)."""
        params: dict[str, Any] = {"ids": list(attempt_ids), "now": models.utcnow()}
        if owner is not None:
            params["owner_prefix"] = owner
        statement = sql.HEARTBEAT if owner is None else sql.HEARTBEAT_OWNED
        self._run("heartbeating attempts", lambda c: c.execute(statement, params),
                  alone=True)

    def _settle(self, attempt_id: int, action: str, **values: Any) -> None:
        def txn(conn: Connection) -> bool:
            done = conn.execute(update(attempts).where(
                attempts.c.id == attempt_id, attempts.c.status.in_(_OPEN)).values(**values))
            return done.rowcount > 0 or conn.execute(
                select(attempts.c.id).where(attempts.c.id == attempt_id)).first() is not None

        if not self._run(action, txn):
            raise StoreError(f"attempt {attempt_id} does not exist", attempt_id=attempt_id)

    def list_attempts(self, run_id: str | None = None,
                      statuses: frozenset[AttemptStatus] | None = None) -> list[AttemptRecord]:
        query = select(attempts).order_by(attempts.c.id)
        if run_id is not None:
            query = query.where(attempts.c.run_id == run_id)
        if statuses is not None:
            query = query.where(attempts.c.status.in_([AttemptStatus(s).value
                                                       for s in statuses]))
        rows = self._run("listing attempts", lambda c: c.execute(query).all(), write=False,
                         alone=True)
        return [attempt_record(r) for r in rows]

    def latest_succeeded_attempt(self) -> AttemptRecord | None:
        """The last request a provider answered with its result, of any run."""
        query = (select(attempts).where(attempts.c.status == AttemptStatus.SUCCEEDED.value,
                                        attempts.c.sent_at.is_not(None),
                                        attempts.c.idempotency_key.is_not(None))
                 .order_by(attempts.c.id.desc()).limit(1))
        row = self._run("reading the last answered attempt",
                        lambda c: c.execute(query).first(), write=False, alone=True)
        return None if row is None else attempt_record(row)

    def latest_attempt(self, run_id: str, identity: Identity) -> AttemptRecord | None:
        row = self._run("reading an attempt", lambda c: latest_attempt_txn(c, run_id, identity),
                        write=False)
        return None if row is None else attempt_record(row)

    def resolve_attempt(self, attempt_id: int, status: AttemptStatus, *, operator: str,
                        reason: str, slot: SlotRecord | None = None,
                        event_of: AttemptEvent | None = None) -> AttemptRecord:
        """``event_of(decided)`` gives the event written in the same transaction."""
        return self._run("resolving an attempt", lambda c: resolve_attempt_txn(
            c, attempt_id, AttemptStatus(status), operator, reason, slot, event_of))

    # -- audit --

    def save_certificate(self, run_id: str, revision: int, digest: str,
                         entries: list[dict[str, Any]]) -> None:
        self._run("saving a certificate", lambda c: save_certificate_txn(
            c, run_id, revision, digest, entries, models.utcnow()))

    def latest_certificate(self, run_id: str) -> CertificateRecord | None:
        row = self._run("reading a certificate", lambda c: c.execute(
            select(certificates).where(certificates.c.run_id == run_id)
            .order_by(certificates.c.revision.desc()).limit(1)).first(), write=False, alone=True)
        if row is None:
            return None
        return CertificateRecord(run_id=row.run_id, revision=row.revision, digest=row.digest,
                                 entries=row.entries, created_at=row.created_at)

    def list_orphans(self, run_id: str) -> list[dict[str, Any]]:
        rows = self._run("listing orphans", lambda c: c.execute(
            select(orphans).where(orphans.c.run_id == run_id)
            .order_by(orphans.c.revision, orphans.c.id)).all(), write=False, alone=True)
        return [{"run_id": r.run_id, "revision": r.revision, "identity": r.identity,
                 "policy": r.policy, "created_at": r.created_at} for r in rows]

    def add_event(self, run_id: str, kind: str, message: str, *, revision: int | None = None,
                  identity: Identity | None = None, data: dict[str, Any] | None = None
                  ) -> None:
        self._run("adding an event", lambda c: add_event_txn(
            c, run_id, kind, message, revision=revision, identity=identity, data=data))

    def list_events(self, run_id: str) -> list[EventRecord]:
        rows = self._run("listing events", lambda c: c.execute(
            select(events).where(events.c.run_id == run_id).order_by(events.c.id)).all(),
            write=False, alone=True)
        return [EventRecord(id=r.id, run_id=r.run_id, kind=r.kind, message=r.message,
                            created_at=r.created_at, revision=r.revision, identity=r.identity,
                            data=r.data) for r in rows]


# ---- engine ---------------------------------------------------------------------------------


def _refuse_ahead(found: str | None, where: str) -> None:
    """A schema no migration here knows was written by a newer Revise: nothing here can
    read it, and `revise db upgrade` cannot take it back."""
    if found is None or found == SCHEMA_HEAD or found in known_revisions():
        return
    raise SchemaNotReady(f"run store {where} is at schema {found}, which a newer Revise "
                         f"wrote; this Revise reads schema {SCHEMA_HEAD} and cannot migrate "
                         "a schema back. Run the newer Revise on this host (every host of "
                         "a deployment runs the same version), or point "
                         "REVISE_DATABASE_URL at this version's store",
                         url=where, schema=found, head=SCHEMA_HEAD)


def _require_head(found: str | None, where: str) -> None:
    head = SCHEMA_HEAD
    if found == head:
        return
    if found is None:
        raise SchemaNotReady(f"run store {where} has no Revise schema yet: nothing has run "
                         "here. Check REVISE_DATABASE_URL / REVISE_HOME, or run `revise db "
                         "upgrade` to create it", url=where)
    raise SchemaNotReady(f"run store {where} is at schema {found}; this Revise reads schema "
                     f"{head}. Run `revise db upgrade` (a read-only command never "
                     "migrates)", url=where, schema=found, head=head)


def _create_engine(url: URL, busy_timeout_ms: int) -> Engine:
    if url.get_backend_name() != "sqlite":
        connect_args = {"connect_timeout": 10} if url.get_backend_name() == "postgresql" else {}
        # At most 15 connections a process, as SQLAlchemy's default (5 + 10 overflow), but
        # 10 of them kept: a worker's threads use 6-15 at once under load, and an overflow
        # connection is closed on return, so the default opened ~4 a job (a server process
        # each) where this opens ~1.
        engine = create_engine(url, connect_args=connect_args, pool_size=10, max_overflow=5)
        _ping_when_idle(engine)
        return engine
    if url.database and url.database != ":memory:" and not url.database.startswith("file:"):
        Path(url.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": busy_timeout_ms / 1000})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # We emit BEGIN ourselves (below); pysqlite's implicit transactions would
        # start writers as DEFERRED, which can fail with SQLITE_BUSY without waiting.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        _enable_wal(cursor, busy_timeout_ms / 1000)
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        # Writers take the write lock up front, so read-then-write decisions
        # (claim, numbering) are serialized and busy waits honour busy_timeout.
        write = conn.get_execution_options().get("revise_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


_PING_AFTER_IDLE = 1.0  # seconds a pooled connection rests before it is pinged on checkout


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection on checkout only when it rested (a busy worker reuses its
    connections within milliseconds: a ping per transaction would be a round trip per
    transaction). A dead one is replaced (``DisconnectionError``); one that died within the
    last second fails its first statement, which ``SqlStore._run`` retries once."""

    @event.listens_for(engine, "checkout")
    def _checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        rested = time.monotonic() - record.info.get("checked_in", 0.0)
        if rested < _PING_AFTER_IDLE:
            return
        try:
            cursor = dbapi_conn.cursor()
            cursor.execute("SELECT 1")
            cursor.close()
            dbapi_conn.rollback()  # end the transaction the ping opened
        except Exception as exc:  # any failure of the ping: this connection is gone
            raise DisconnectionError(str(exc)) from exc

    @event.listens_for(engine, "checkin")
    def _checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["checked_in"] = time.monotonic()


def _enable_wal(cursor: Any, timeout: float) -> None:
    """WAL is a property of the file; switching to it can fail with SQLITE_BUSY at once
    (without the busy handler) when another process opens a new database at the same
    moment, so retry until the timeout."""
    deadline = time.monotonic() + timeout
    while cursor.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.01, 0.05))


def _sqlstate(exc: DBAPIError) -> str | None:
    return getattr(exc.orig, "sqlstate", None)


def _reason(exc: Exception) -> str:
    orig = getattr(exc, "orig", None) or exc
    text = str(orig).strip().splitlines()
    return text[0] if text else type(orig).__name__

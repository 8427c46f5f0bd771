"""A revision's start and its end, one transaction each (``SqlStore.start_revision`` and
``SqlStore.end_revision``).

Starting a revision takes its job (when a sandbox worker runs it), its lease, the run's
status and reads the committed prefix; the gate decides on that prefix inside the same
transaction, so a refused start writes nothing. Ending it writes everything the
revision's report says at once: certificate, orphans, events, the revision's status and
summary, the run's status and the job's end. Between them only calls are decided and
committed. The certificate and event rows are written here for the rest of the store too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, update

from broker import models
from broker import statements as sql
from broker.identity import Identity, sha256_hex
from broker.models import (
    attempt_record,
    orphans,
    revisions,
    runs,
    slot_record,
)
from broker.records import (
    AttemptRecord,
    RevisionEnd,
    RevisionStatus,
    RunStatus,
    SlotRecord,
)


def put_blob_txn(conn: Connection, run_id: str, kind: str, data: bytes) -> str:
    """Store ``data`` under its sha256 for the run (once: same digest, same bytes): the
    run's inputs and the claimed calls' payloads."""
    return put_blobs_txn(conn, run_id, {kind: data})[kind]


def put_blobs_txn(conn: Connection, run_id: str, blobs: dict[str, bytes]) -> dict[str, str]:
    """``put_blob_txn`` for several blobs (kind: bytes) in one statement; their digests."""
    digests = {kind: sha256_hex(data) for kind, data in blobs.items()}
    now = models.utcnow()
    conn.execute(sql.insert_blob(conn.dialect.name), [
        {"run_id": run_id, "digest": digests[kind], "kind": kind, "data": data,
         "created_at": now} for kind, data in blobs.items()])
    return digests


def slots_txn(conn: Connection, run_id: str) -> list[SlotRecord]:
    rows = conn.execute(sql.SLOTS_OF_RUN, {"run_id": run_id}).all()
    # Text paths sort "10" before "2"; the identity order compares path tuples.
    return sorted((slot_record(r) for r in rows), key=lambda s: s.identity)


def start_revision_txn(conn: Connection, run_id: str, revision: int, *, owner: str,
                       job_id: str | None, event: str,
                       admit: Callable[[list[SlotRecord]], bool], resumes: int = 0
                       ) -> tuple[list[SlotRecord], bool] | None:
    """Take the revision's lease for ``owner`` and read the prefix; ``admit(slots)`` (the
    gate again) decides whether it runs. None when the revision is no longer running, or
    when the job ``job_id`` is not waiting for its start number ``resumes`` (a stale
    delivery: the job parked, finished, or was resumed as another task since);
    ``(slots, False)`` when the gate refused it (only the lease taken)."""
    now = models.utcnow()
    if job_id is not None:
        # First, and on the job row: a resume of a job judged lost (``resume_lost_job``)
        # is conditional on this row, so of the two exactly one goes on.
        fenced = conn.execute(sql.JOB_AT_START,
                              {"job": job_id, "start_number": resumes, "now": now})
        if fenced.rowcount == 0:
            return None
    owned = conn.execute(sql.OWN_REVISION, {"run": run_id, "number": revision,
                                            "lease_owner": owner, "now": now})
    if owned.rowcount == 0:
        return None
    prefix = slots_txn(conn, run_id)
    if not admit(prefix):
        return prefix, False
    if job_id is not None:
        conn.execute(sql.JOB_STARTED, {"job": job_id, "now": now})
    conn.execute(sql.RUN_STATUS, {"run": run_id, "run_status": RunStatus.RUNNING.value,
                                  "run_detail": None, "now": now})
    add_event_txn(conn, run_id, "sandbox_start", event, revision=revision, at=now)
    return prefix, True


def fail_job_revision_txn(conn: Connection, job_id: str, resumes: int, reason: str,
                           summary: dict[str, Any]) -> bool:
    """Job ``job_id``'s revision fails (its sandbox job gave up or broke) with its job
    finished and its run failed, if start number ``resumes`` is still the job's current
    one and the revision still runs. False for a stale delivery: a copy of a task the job
    has moved past (finished, parked, resumed as another task) writes nothing, so it never
    turns a finished revision into a failed one."""
    now = models.utcnow()
    # The job row first, as ``start_revision_txn`` does: a resume of the job and this
    # failure are conditional on it, so of the two exactly one goes on.
    job = conn.execute(sql.JOB_FAILS_AT_START,
                       {"job": job_id, "start_number": resumes, "now": now}).first()
    if job is None:
        return False
    failed = conn.execute(update(revisions).where(
        revisions.c.run_id == job.run_id, revisions.c.revision == job.revision,
        revisions.c.status == RevisionStatus.RUNNING)
        .values(status=RevisionStatus.FAILED.value, summary=summary))
    if failed.rowcount == 0:
        return False  # it ended meanwhile; the job row only caught up
    fail_run_txn(conn, job.run_id, job.revision, reason, now)
    add_event_txn(conn, job.run_id, "sandbox_failed", reason, revision=job.revision, at=now)
    return True


def fail_run_txn(conn: Connection, run_id: str, revision: int, reason: str,
                 at: datetime) -> None:
    """The run fails with ``reason`` if ``revision`` is its latest (a run blocked on an
    unresolved attempt stays blocked)."""
    conn.execute(update(runs).where(
        runs.c.run_id == run_id, runs.c.revisions == revision,
        runs.c.status != RunStatus.BLOCKED.value)
        .values(status=RunStatus.FAILED.value, detail=reason[:500], updated_at=at))


def revision_facts_txn(conn: Connection, run_id: str, revision: int
                       ) -> tuple[list[AttemptRecord], list[SlotRecord]]:
    """What a finished revision's report is made of: its attempts and the run's slots."""
    rows = conn.execute(sql.ATTEMPTS_OF_REVISION, {"run_id": run_id, "revision": revision}
                        ).all()
    return [attempt_record(r) for r in rows], slots_txn(conn, run_id)


def end_revision_txn(conn: Connection, end: RevisionEnd) -> None:
    now = models.utcnow()
    save_certificate_txn(conn, end.run_id, end.revision, end.certificate_digest,
                         list(end.certificate_entries), now)
    save_orphans_txn(conn, end.run_id, end.revision, end.orphans, end.orphan_policy, now)
    if end.events:  # an executemany of no rows is an insert of one empty row
        conn.execute(sql.INSERT_EVENT, [
            event_row(end.run_id, kind, message, revision=end.revision, data=data, at=now)
            for kind, message, data in end.events])
    conn.execute(sql.REVISION_ENDS, {"run": end.run_id, "number": end.revision,
                                     "revision_status": end.status, "report": end.summary})
    conn.execute(sql.RUN_STATUS, {"run": end.run_id, "run_detail": end.detail, "now": now,
                                  "run_status": RunStatus(end.run_status).value})
    if end.job_id is not None:
        conn.execute(sql.JOB_FINISHED, {"job": end.job_id, "now": now})


def save_certificate_txn(conn: Connection, run_id: str, revision: int, digest: str,
                         entries: list[dict[str, Any]], at: datetime) -> None:
    """The revision's certificate, replacing one saved before for that revision."""
    conn.execute(sql.save_certificate(conn.dialect.name), {
        "run_id": run_id, "revision": revision, "digest": digest, "entries": entries,
        "created_at": at})


def save_orphans_txn(conn: Connection, run_id: str, revision: int,
                     identities: Sequence[Identity], policy: str, at: datetime) -> None:
    """The frozen identities a revision did not reach (once each)."""
    if not identities:
        return
    conn.execute(sql.upsert(conn, orphans).values([
        {"run_id": run_id, "revision": revision, "identity": str(i), "policy": str(policy),
         "created_at": at} for i in identities])
        .on_conflict_do_nothing(index_elements=["run_id", "revision", "identity"]))


def event_row(run_id: str, kind: str, message: str, *, revision: int | None = None,
              identity: Identity | None = None, data: dict[str, Any] | None = None,
              at: datetime | None = None) -> dict[str, Any]:
    return {"run_id": run_id, "revision": revision,
            "identity": None if identity is None else str(identity), "kind": kind,
            "message": message, "data": data, "created_at": at or models.utcnow()}


def add_event_txn(conn: Connection, run_id: str, kind: str, message: str, *,
                  revision: int | None = None, identity: Identity | None = None,
                  data: dict[str, Any] | None = None, at: datetime | None = None) -> None:
    conn.execute(sql.INSERT_EVENT, event_row(run_id, kind, message, revision=revision,
                                             identity=identity, data=data, at=at))

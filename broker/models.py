"""The run store schema as SQLAlchemy models (one source of truth with Alembic).

The same models run on SQLite (embedded mode) and PostgreSQL, so only portable
types are used: ``sqlalchemy.JSON`` for structured values and ``UTCDateTime``
for timestamps. Fanout paths are stored as canonical text ("0.3", "" for ()).
Constraint names come from the naming convention so that the migration in
``broker/migrations/versions`` can name them identically.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from broker.identity import Identity
from broker.records import (
    AttemptRecord,
    AttemptStatus,
    JobRecord,
    JobStatus,
    RevisionRecord,
    RevisionStatus,
    RunRecord,
    RunStatus,
    SlotRecord,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC timestamp on every backend.

    SQLite keeps no offset, so values are converted to UTC before they are
    written and tagged as UTC when read back; PostgreSQL uses timestamptz.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}; the store only accepts aware datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class FreeText(TypeDecorator[str]):
    """Text that comes from outside (a script's error, a provider's message, an operator's
    reason): PostgreSQL text cannot hold NUL (0x00), so a NUL is stored as U+FFFD on every
    backend rather than failing the transaction that carries it (a revision's end)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        return value.replace("\x00", "\ufffd") if value is not None else None


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Run(Base):
    __tablename__ = "runs"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    status: Mapped[str] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(FreeText)
    revisions: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Random per run, never shown: the secret half of its requests' idempotency keys
    # (``broker.identity.request_key``). NULL only in a row a migration could not fill.
    token: Mapped[str | None] = mapped_column(String(64))


class Revision(Base):
    __tablename__ = "revisions"

    # The composite primary key is the unique (run_id, revision) that makes
    # revision numbering race-free: a second writer of the same number fails.
    run_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    source_text: Mapped[str] = mapped_column(Text)
    source_digest: Mapped[str] = mapped_column(String(128))
    status: Mapped[str] = mapped_column(String(20))
    summary: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # The run's inputs as this revision received them, by digest (bytes in ``blobs``);
    # NULL for revisions written before the store kept inputs.
    args_digest: Mapped[str | None] = mapped_column(String(64))
    envelope_digest: Mapped[str | None] = mapped_column(String(64))
    # The revision's lease: who runs it and when it last said so (NULL before 0004).
    owner: Mapped[str | None] = mapped_column(String(200))
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Job(Base):
    """A job the dispatcher accepted, with the sandbox message it queued: Redis is the
    transport, this row is the truth (a lost message is queued again from here)."""

    __tablename__ = "jobs"
    __table_args__ = (Index(None, "status"), Index(None, "run_id", "revision"))

    job_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("runs.run_id", ondelete="CASCADE"))
    revision: Mapped[int] = mapped_column(Integer)
    # accepted | started | parked | finished | lost
    status: Mapped[str] = mapped_column(String(20))
    message: Mapped[dict[str, Any]] = mapped_column(JSON)
    requeues: Mapped[int] = mapped_column(Integer)
    resumes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Blob(Base):
    """A JSON value of a run by the sha256 of its canonical bytes: args, envelopes, and
    the payloads that reached the broker. Content-addressed, so written once."""

    __tablename__ = "blobs"

    run_id: Mapped[str] = mapped_column(
        String(200), ForeignKey("runs.run_id", ondelete="CASCADE"), primary_key=True
    )
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(20))  # args | envelope | payload (first writer)
    data: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Artifact(Base):
    """An artifact in the run store's database (``REVISE_ARTIFACT_STORE=database``): one row
    per content id, its bytes in ``artifact_chunks``; written with its chunks in one
    transaction, so a row is never seen without its bytes."""

    __tablename__ = "artifacts"

    id: Mapped[str] = mapped_column(String(71), primary_key=True)  # sha256:<64 hex>
    media_type: Mapped[str] = mapped_column(String(200))
    size: Mapped[int] = mapped_column(BigInteger)
    chunks: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ArtifactChunk(Base):
    __tablename__ = "artifact_chunks"

    artifact_id: Mapped[str] = mapped_column(
        String(71), ForeignKey("artifacts.id", ondelete="CASCADE"), primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(LargeBinary)


class Slot(Base):
    """A committed call: the prefix only grows, one row per identity."""

    __tablename__ = "slots"
    __table_args__ = (
        UniqueConstraint("run_id", "site", "path", "occurrence"),
        Index(None, "run_id", "site", "path"),
        Index(None, "run_id", "capability", "digest"),  # the paid-payload ledger
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200))
    site: Mapped[str] = mapped_column(String(2000))
    path: Mapped[str] = mapped_column(String(200))
    occurrence: Mapped[int] = mapped_column(Integer)
    capability: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(128))
    fingerprint: Mapped[str] = mapped_column(String(128))
    chain_fingerprint: Mapped[str | None] = mapped_column(String(128))
    line: Mapped[int | None] = mapped_column(Integer)
    result: Mapped[Any] = mapped_column(JSON)
    usage: Mapped[dict[str, Any]] = mapped_column(JSON)
    cost: Mapped[float] = mapped_column(Float)
    revision: Mapped[int] = mapped_column(Integer)
    committed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Attempt(Base):
    """An attempt record, durable before the provider is called."""

    __tablename__ = "attempts"
    __table_args__ = (
        UniqueConstraint("run_id", "site", "path", "occurrence", "number"),
        Index(None, "status"),
        Index(None, "run_id", "capability", "digest"),  # uncertain and in-flight payments
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200))
    site: Mapped[str] = mapped_column(String(2000))
    path: Mapped[str] = mapped_column(String(200))
    occurrence: Mapped[int] = mapped_column(Integer)
    number: Mapped[int] = mapped_column(Integer)
    capability: Mapped[str] = mapped_column(String(200))
    digest: Mapped[str] = mapped_column(String(128))
    revision: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20))
    owner: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    resolved_reason: Mapped[str | None] = mapped_column(FreeText)
    resolved_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # The dispatch record, readable from any host: when the request left for the provider
    # (written just before it does) and when its answer was recorded (NULL: none came).
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    answered_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # What executing the claimed call needs besides its payload blob (``digest``): a broker
    # worker reads the call from here, never from a queue message.
    take: Mapped[int] = mapped_column(Integer, server_default="1")
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    chain_fingerprint: Mapped[str | None] = mapped_column(String(128))
    line: Mapped[int | None] = mapped_column(Integer)


class Certificate(Base):
    __tablename__ = "certificates"

    run_id: Mapped[str] = mapped_column(String(200), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    digest: Mapped[str] = mapped_column(String(128))
    entries: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Orphan(Base):
    __tablename__ = "orphans"
    # Unique so that saving a revision's orphans twice records them once.
    __table_args__ = (UniqueConstraint("run_id", "revision", "identity"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200))
    revision: Mapped[int] = mapped_column(Integer)
    identity: Mapped[str] = mapped_column(String(2400))
    policy: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (Index(None, "run_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(String(200))
    revision: Mapped[int | None] = mapped_column(Integer)
    identity: Mapped[str | None] = mapped_column(String(2400))
    kind: Mapped[str] = mapped_column(String(50))
    message: Mapped[str] = mapped_column(FreeText)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON(none_as_null=True))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


# ---- the tables, for Core statements (the store's transactions) ---------------------------------

runs = cast(Table, Run.__table__)
revisions = cast(Table, Revision.__table__)
jobs = cast(Table, Job.__table__)
blobs = cast(Table, Blob.__table__)
artifacts = cast(Table, Artifact.__table__)
artifact_chunks = cast(Table, ArtifactChunk.__table__)
slots = cast(Table, Slot.__table__)
attempts = cast(Table, Attempt.__table__)
certificates = cast(Table, Certificate.__table__)
orphans = cast(Table, Orphan.__table__)
events = cast(Table, Event.__table__)


# ---- rows -> records (the edge) ---------------------------------------------------------------
# Each function takes a Core row or a model instance (both expose the columns as attributes).


def _path(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".")) if text else ()


def identity_of(row: Any) -> Identity:
    """The identity a row of slots or attempts names (its site, path and occurrence)."""
    return Identity(row.site, _path(row.path), row.occurrence)


def slot_record(row: Any) -> SlotRecord:
    return SlotRecord(run_id=row.run_id, identity=identity_of(row), capability=row.capability,
                      digest=row.digest, fingerprint=row.fingerprint, result=row.result,
                      usage=row.usage or {}, cost=row.cost, revision=row.revision,
                      committed_at=row.committed_at,
                      chain_fingerprint=row.chain_fingerprint or "", line=row.line)


def attempt_record(row: Any) -> AttemptRecord:
    return AttemptRecord(id=row.id, run_id=row.run_id, identity=identity_of(row),
                         capability=row.capability, digest=row.digest, revision=row.revision,
                         number=row.number, status=AttemptStatus(row.status), owner=row.owner,
                         created_at=row.created_at, heartbeat_at=row.heartbeat_at,
                         idempotency_key=row.idempotency_key, error=row.error,
                         sent_at=row.sent_at, answered_at=row.answered_at,
                         take=row.take or 1, fingerprint=row.fingerprint or "",
                         chain_fingerprint=row.chain_fingerprint or "", line=row.line)


def run_record(row: Any) -> RunRecord:
    return RunRecord(run_id=row.run_id, status=RunStatus(row.status), created_at=row.created_at,
                     updated_at=row.updated_at, revisions=row.revisions, detail=row.detail)


def revision_record(row: Any) -> RevisionRecord:
    return RevisionRecord(run_id=row.run_id, revision=row.revision,
                          source_digest=row.source_digest, source_text=row.source_text,
                          status=RevisionStatus(row.status), created_at=row.created_at,
                          summary=row.summary,
                          args_digest=row.args_digest, envelope_digest=row.envelope_digest,
                          owner=row.owner, heartbeat_at=row.heartbeat_at)


def job_record(row: Any) -> JobRecord:
    return JobRecord(job_id=row.job_id, run_id=row.run_id, revision=row.revision,
                     status=JobStatus(row.status), message=row.message, requeues=row.requeues,
                     created_at=row.created_at, updated_at=row.updated_at,
                     resumes=row.resumes or 0)

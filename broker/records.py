"""Frozen value objects the store reads and writes (no I/O here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from broker.identity import Identity


class AttemptStatus(StrEnum):
    PENDING = "pending"  # written before dispatch; owner is (or was) calling the provider
    SUCCEEDED = "succeeded"  # provider answered and the slot is committed
    FAILED = "failed"  # provider answered with an error it did not charge for
    # The provider may have charged (a 5xx after the work, a timeout, an unusable answer):
    # paid until proven otherwise. A request with the same key retries it where the
    # provider honours keys; else an operator decides (``revise reconcile``).
    UNCERTAIN = "uncertain"
    UNRESOLVED = "unresolved"  # owner died before commit; needs an operator decision
    ABANDONED = "abandoned"  # operator: the identity may execute once more
    RESOLVED = "resolved"  # operator wrote back a known result


OPEN_ATTEMPT_STATUSES = frozenset({AttemptStatus.PENDING, AttemptStatus.UNRESOLVED})
# A committed slot holds the answer: the provider's, or one an operator wrote back.
COMMITTED_ATTEMPT_STATUSES = frozenset({AttemptStatus.SUCCEEDED, AttemptStatus.RESOLVED})
# What an operator may decide on (``revise reconcile``): open, or possibly charged.
RECONCILABLE_ATTEMPT_STATUSES = OPEN_ATTEMPT_STATUSES | {AttemptStatus.UNCERTAIN}


class RevisionStatus(StrEnum):
    """A revision's state in the store, and the ``status`` of its run report."""

    RUNNING = "running"
    PARKED = "parked"  # a sandbox job's answer only: the revision runs on, its job waits
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"


class RunStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    BLOCKED = "blocked"


@dataclass(frozen=True)
class SlotRecord:
    """A committed call: r = (ι, c, H(p), v, u)."""

    run_id: str
    identity: Identity
    capability: str
    digest: str
    fingerprint: str
    result: Any
    usage: dict[str, Any] = field(default_factory=dict)
    cost: float = 0.0
    revision: int = 0
    committed_at: datetime | None = None
    chain_fingerprint: str = ""  # the call expression and the helper calls that reach it
    line: int | None = None  # of the call in the revision that committed it

    def same_call(self, capability: str, digest: str) -> bool:
        return self.capability == capability and self.digest == digest


@dataclass(frozen=True)
class AttemptRecord:
    id: int
    run_id: str
    identity: Identity
    capability: str
    digest: str
    revision: int
    number: int
    status: AttemptStatus
    owner: str
    created_at: datetime
    heartbeat_at: datetime
    idempotency_key: str | None = None
    error: dict[str, Any] | None = None
    sent_at: datetime | None = None  # the request left for the provider
    answered_at: datetime | None = None  # its answer (result or error) was recorded
    take: int = 1  # which take of its payload (the blob under ``digest`` holds both)
    fingerprint: str = ""  # the call expression's, for the slot its commit writes
    chain_fingerprint: str = ""
    line: int | None = None


# The event written with a decision on an attempt, in the decision's transaction:
# (kind, message, data) from the decided record.
AttemptEvent = Callable[[AttemptRecord], tuple[str, str, dict[str, Any]]]


@dataclass(frozen=True)
class CallClaim:
    """One call of a wave as the claim transaction sees it."""

    identity: Identity
    capability: str
    digest: str
    check_ledger: bool = True  # False when the ledger policy lets a semantic repeat pay
    payload: bytes | None = None  # the bytes whose sha256 is the payload blob's digest
    # The provider deduplicates by Idempotency-Key: an uncertain payment of this very
    # request is retried under its key instead of counting as a second payment.
    dedupes: bool = False
    # take > 1: the digests of this payload's lower takes, and whether the envelope
    # approves a further take of this capability (``Envelope.approved_takes``).
    lower_takes: tuple[str, ...] = ()
    take_approved: bool = False
    # Stored with the attempt: what executing it and committing its slot need.
    take: int = 1
    fingerprint: str = ""
    chain_fingerprint: str = ""
    line: int | None = None


@dataclass(frozen=True)
class PaidAt:
    """Where a request was paid before: a committed slot, or an attempt that may have
    been charged (in flight, this wave's included; uncertain; unresolved)."""

    identity: Identity
    revision: int
    why: str  # committed | in flight | may have been charged
    line: int | None = None


@dataclass(frozen=True)
class Begin:
    """The store's decision on one call of a wave (the wave is decided in one transaction).

    Exactly one field says what happened: committed already (``slot``: a replay, or a
    divergence when it is another call), a stop (``repeat``, ``take``, ``over_budget``),
    an open or uncertain attempt in the way (``attempt``, not ``claimed``), this
    revision's own failed or uncertain attempt (``failed``: answered again, never paid
    twice), a revision that is no longer running (``stale``), or ours to spend
    (``attempt`` and ``claimed``). Nothing at all (every field empty) when another call
    of the wave stopped or was in the way: the claim transaction claims a whole wave or
    nothing.
    """

    slot: SlotRecord | None = None
    repeat: PaidAt | None = None  # the same request paid (or maybe paid) before
    take: PaidAt | None = None  # a further take of a paid payload, not approved
    over_budget: str | None = None  # why the budget does not allow one more attempt
    attempt: AttemptRecord | None = None  # ours when ``claimed``, else the one in the way
    claimed: bool = False
    failed: AttemptRecord | None = None
    stale: str | None = None  # the revision's status when it is no longer running

    def stops(self, capability: str, digest: str) -> bool:
        """Does this decision stop the wave (nothing of it may be dispatched)?"""
        return (self.repeat is not None or self.take is not None
                or self.over_budget is not None or self.stale is not None
                or (self.slot is not None and not self.slot.same_call(capability, digest)))

    @property
    def in_the_way(self) -> bool:
        return self.attempt is not None and not self.claimed


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    status: RunStatus
    created_at: datetime
    updated_at: datetime
    revisions: int = 0
    detail: str | None = None


@dataclass(frozen=True)
class RevisionRecord:
    run_id: str
    revision: int
    source_digest: str
    source_text: str
    status: RevisionStatus
    created_at: datetime
    summary: dict[str, Any] | None = None
    args_digest: str | None = None  # the run's inputs as this revision received them
    envelope_digest: str | None = None
    owner: str | None = None  # the revision's lease: its runner, and when it last renewed
    heartbeat_at: datetime | None = None


class JobStatus(StrEnum):
    ACCEPTED = "accepted"  # the dispatcher numbered it and queued its sandbox message
    STARTED = "started"  # a sandbox worker took it (the revision's lease is that worker's)
    PARKED = "parked"  # its calls are in flight; it holds no sandbox until they are settled
    FINISHED = "finished"
    LOST = "lost"  # its message or its worker was lost; the revision is failed, resumable


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    run_id: str
    revision: int
    status: JobStatus
    message: dict[str, Any]
    requeues: int
    created_at: datetime
    updated_at: datetime
    resumes: int = 0  # times it was resumed (parked, or lost with its sandbox worker)


@dataclass(frozen=True)
class CertificateRecord:
    run_id: str
    revision: int
    digest: str
    entries: list[dict[str, Any]]
    created_at: datetime


@dataclass(frozen=True)
class EventRecord:
    id: int
    run_id: str
    kind: str
    message: str
    created_at: datetime
    revision: int | None = None
    identity: str | None = None
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class RevisionEnd:
    """Everything a finished revision writes, in one transaction (``RunStore.end_revision``)."""

    run_id: str
    revision: int
    status: str  # the revision's: succeeded | failed | stopped
    summary: dict[str, Any]  # the run report
    run_status: RunStatus
    detail: str | None
    certificate_digest: str
    certificate_entries: tuple[dict[str, Any], ...]
    orphans: tuple[Identity, ...] = ()
    orphan_policy: str = "warn"
    events: tuple[tuple[str, str, dict[str, Any] | None], ...] = ()  # (kind, message, data)
    job_id: str | None = None  # the sandbox job that ran it, finished with it

"""In-memory RunStore: the stand-in for tests of the pure core and for benchmarks.

Same semantics as SqlStore (unique identities, atomic claims, idempotent
commit) behind one lock; nothing survives the process.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from broker.errors import SlotConflict, StoreError
from broker.identity import Identity
from broker.records import (
    OPEN_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    CertificateRecord,
    Claim,
    EventRecord,
    RevisionRecord,
    RunRecord,
    RunStatus,
    SlotRecord,
)

_NOT_CLAIMABLE = OPEN_ATTEMPT_STATUSES | {AttemptStatus.SUCCEEDED, AttemptStatus.RESOLVED}


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryStore:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._runs: dict[str, RunRecord] = {}
        self._revisions: dict[str, list[RevisionRecord]] = {}
        self._slots: dict[tuple[str, Identity], SlotRecord] = {}
        self._attempts: list[AttemptRecord] = []
        self._certificates: dict[str, list[CertificateRecord]] = {}
        self._orphans: list[dict[str, Any]] = []
        self._events: list[EventRecord] = []

    def close(self) -> None:
        """Nothing to release."""

    # runs and revisions
    def ensure_run(self, run_id: str) -> RunRecord:
        with self._lock:
            if run_id not in self._runs:
                now = _now()
                self._runs[run_id] = RunRecord(run_id, RunStatus.RUNNING, now, now)
            return self._runs[run_id]

    def get_run(self, run_id: str) -> RunRecord | None:
        return self._runs.get(run_id)

    def list_runs(self, limit: int = 50) -> list[RunRecord]:
        return sorted(self._runs.values(), key=lambda r: r.updated_at, reverse=True)[:limit]

    def set_run_status(self, run_id: str, status: RunStatus, detail: str | None = None) -> None:
        with self._lock:
            run = self.ensure_run(run_id)
            self._runs[run_id] = replace(run, status=status, detail=detail, updated_at=_now())

    def add_revision(self, run_id: str, source_text: str, source_digest: str) -> int:
        with self._lock:
            run = self.ensure_run(run_id)
            revisions = self._revisions.setdefault(run_id, [])
            number = len(revisions) + 1
            revisions.append(RevisionRecord(run_id, number, source_digest, source_text,
                                            "running", _now()))
            self._runs[run_id] = replace(run, revisions=number, updated_at=_now())
            return number

    def finish_revision(self, run_id: str, revision: int, status: str,
                        summary: dict[str, Any]) -> None:
        with self._lock:
            revisions = self._revisions[run_id]
            revisions[revision - 1] = replace(revisions[revision - 1], status=status,
                                              summary=summary)

    def get_revision(self, run_id: str, revision: int) -> RevisionRecord | None:
        revisions = self._revisions.get(run_id, [])
        return revisions[revision - 1] if 0 < revision <= len(revisions) else None

    def list_revisions(self, run_id: str) -> list[RevisionRecord]:
        return list(self._revisions.get(run_id, []))

    # slots
    def get_slot(self, run_id: str, identity: Identity) -> SlotRecord | None:
        return self._slots.get((run_id, identity))

    def list_slots(self, run_id: str) -> list[SlotRecord]:
        return sorted((s for (r, _), s in self._slots.items() if r == run_id),
                      key=lambda s: s.identity)

    def ledger_digests(self, run_id: str, site: str, path: tuple[int, ...],
                       before_revision: int) -> set[str]:
        return {s.digest for (r, i), s in self._slots.items()
                if r == run_id and i.site == site and i.path == path
                and s.revision < before_revision}

    # attempts
    def claim_attempt(self, run_id: str, identity: Identity, capability: str, digest: str,
                      revision: int, owner: str, idempotency_key: str | None) -> Claim:
        with self._lock:
            previous = [a for a in self._attempts
                        if a.run_id == run_id and a.identity == identity]
            if previous and previous[-1].status in _NOT_CLAIMABLE:
                return Claim(previous[-1], claimed=False)
            now = _now()
            attempt = AttemptRecord(len(self._attempts) + 1, run_id, identity, capability,
                                    digest, revision, len(previous), AttemptStatus.PENDING,
                                    owner, now, now, idempotency_key)
            self._attempts.append(attempt)
            return Claim(attempt, claimed=True)

    def _set_attempt(self, attempt_id: int, **changes: Any) -> AttemptRecord:
        attempt = replace(self._attempts[attempt_id - 1], **changes)
        self._attempts[attempt_id - 1] = attempt
        return attempt

    def commit(self, slot: SlotRecord, attempt_id: int | None) -> SlotRecord:
        with self._lock:
            key = (slot.run_id, slot.identity)
            stored = self._slots.setdefault(key, replace(slot, committed_at=_now()))
            if not stored.same_call(slot.capability, slot.digest):
                raise SlotConflict(f"{slot.identity} is committed with another call",
                                   identity=str(slot.identity))
            if attempt_id is not None:
                self._set_attempt(attempt_id, status=AttemptStatus.SUCCEEDED)
            return stored

    def fail_attempt(self, attempt_id: int, error: dict[str, Any]) -> None:
        with self._lock:
            self._set_attempt(attempt_id, status=AttemptStatus.FAILED, error=error)

    def heartbeat_attempt(self, attempt_id: int) -> None:
        with self._lock:
            self._set_attempt(attempt_id, heartbeat_at=_now())

    def list_attempts(self, run_id: str | None = None,
                      statuses: frozenset[AttemptStatus] | None = None) -> list[AttemptRecord]:
        return [a for a in self._attempts if (run_id is None or a.run_id == run_id)
                and (statuses is None or a.status in statuses)]

    def mark_unresolved(self, stale_before: datetime) -> list[AttemptRecord]:
        with self._lock:
            return [self._set_attempt(a.id, status=AttemptStatus.UNRESOLVED)
                    for a in list(self._attempts)
                    if a.status is AttemptStatus.PENDING and a.heartbeat_at < stale_before]

    def resolve_attempt(self, attempt_id: int, status: AttemptStatus, *, operator: str,
                        reason: str, slot: SlotRecord | None = None) -> AttemptRecord:
        with self._lock:
            attempt = self._attempts[attempt_id - 1]
            if attempt.status not in OPEN_ATTEMPT_STATUSES:
                raise StoreError(f"attempt {attempt_id} is {attempt.status}, not open")
            if slot is not None:
                self.commit(slot, None)
            return self._set_attempt(attempt_id, status=status)

    # audit
    def save_certificate(self, run_id: str, revision: int, digest: str,
                         entries: list[dict[str, Any]]) -> None:
        with self._lock:
            self._certificates.setdefault(run_id, []).append(
                CertificateRecord(run_id, revision, digest, entries, _now()))

    def latest_certificate(self, run_id: str) -> CertificateRecord | None:
        certificates = self._certificates.get(run_id)
        return certificates[-1] if certificates else None

    def save_orphans(self, run_id: str, revision: int, identities: list[Identity],
                     policy: str) -> None:
        with self._lock:
            self._orphans.extend({"run_id": run_id, "revision": revision,
                                  "identity": str(i), "policy": policy} for i in identities)

    def list_orphans(self, run_id: str) -> list[dict[str, Any]]:
        return [o for o in self._orphans if o["run_id"] == run_id]

    def add_event(self, run_id: str, kind: str, message: str, *, revision: int | None = None,
                  identity: Identity | None = None, data: dict[str, Any] | None = None) -> None:
        with self._lock:
            self._events.append(EventRecord(len(self._events) + 1, run_id, kind, message,
                                            _now(), revision,
                                            None if identity is None else str(identity), data))

    def list_events(self, run_id: str) -> list[EventRecord]:
        return [e for e in self._events if e.run_id == run_id]

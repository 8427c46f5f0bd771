"""Rows a crash leaves behind, written straight into a test's run store.

An attempt left unresolved by a dead broker worker cannot be produced on demand by
the product (it takes a kill at the right moment: ``tests/crash`` does that for
real); tests of what reads such rows (reports, reconcile) write one directly.
"""

from __future__ import annotations

from sqlalchemy import insert

from broker import models
from broker.identity import Identity
from broker.models import attempt_record, attempts
from broker.records import AttemptRecord, AttemptStatus
from broker.sqlstore import SqlStore


def left_unresolved(store: SqlStore, run_id: str, identity: Identity, *, capability: str,
                    digest: str, revision: int, owner: str = "elsewhere:1:1:1"
                    ) -> AttemptRecord:
    """A sent attempt whose broker died before its commit, marked unresolved."""
    now = models.utcnow()
    with store.engine.begin() as conn:
        row = conn.execute(insert(attempts).returning(*attempts.c), {
            "run_id": run_id, "site": identity.site, "path": identity.path_text,
            "occurrence": identity.occurrence, "number": 0, "capability": capability,
            "digest": digest, "revision": revision, "status": AttemptStatus.PENDING.value,
            "owner": owner, "idempotency_key": None, "error": None, "created_at": now,
            "heartbeat_at": now, "sent_at": now, "take": 1}).one()
    return store.resolve_attempt(attempt_record(row).id, AttemptStatus.UNRESOLVED,
                                 operator="reconciler", reason="owner process is gone")

"""A running revision's lease in the run store: who runs it, renewed while it runs.

The revision's runner (an embedded ``revise run``, a sandbox worker) renews the
lease every third of ``revision_lease_seconds`` from a background thread. The
reconciler's sweep (``orchestrator.reconcile.sweep_revisions``) marks a
revision whose owner is gone (a dead process on this host at once, elsewhere
when the lease expires) ``failed`` with a named reason, so no run stays
``running`` without a live owner. A renewal that cannot reach the store is
skipped: the lease then expires rather than anything claiming a state it
cannot write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from broker.errors import StoreUnavailable
from broker.owner import current_owner
from broker.periodic import Periodic
from broker.store import RunStore

log = logging.getLogger("revise.lease")


class RevisionLease:
    def __init__(self, store: RunStore, run_id: str, revision: int, seconds: float) -> None:
        self._store = store
        self._run_id = run_id
        self._revision = revision
        self._interval = max(seconds / 3, 0.2)
        self.owner = current_owner()

    def renew(self) -> bool | None:
        """True: renewed; False: the revision is no longer running; None: no store."""
        try:
            return self._store.heartbeat_revision(self._run_id, self._revision, self.owner)
        except StoreUnavailable as exc:
            log.warning("run %s revision %s: lease renewal failed (%s)", self._run_id,
                        self._revision, exc.message)
            return None

    def _beat(self) -> float | None:
        # While the store is away, try every second: renewed as soon as it is back.
        return None if self.renew() is not None else min(1.0, self._interval)

    @contextmanager
    def renewed(self) -> Iterator[RevisionLease]:
        """Renew the lease while the block runs; it was just taken (``start_revision``
        wrote the owner and the heartbeat in the revision's start transaction)."""
        with Periodic(f"revision-lease-{self._run_id}-{self._revision}", self._interval,
                      self._beat):
            yield self

"""The heartbeat of open attempts: one UPDATE for all of a process's attempts, one thread.

A pending attempt whose heartbeat is older than ``attempt_lease_seconds`` is taken
for one whose owner is gone (``broker.crash_window``). While a provider call runs,
its owner renews the attempt every third of the lease; so does the side that asked
for a call while its claimed attempt waits for a broker to take it. One thread per
process beats every attempt the process holds open in a single statement, and only
while the process still owns it: an attempt a broker took is the broker's to renew.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from broker.errors import StoreUnavailable
from broker.owner import process_owner
from broker.periodic import Periodic
from broker.store import RunStore

log = logging.getLogger("revise.heartbeats")


class AttemptHeartbeats:
    def __init__(self, store: RunStore, interval: float) -> None:
        self._store = store
        self._interval = max(interval, 0.5)
        self._open: set[int] = set()
        self._lock = threading.Lock()
        self._beating: Periodic | None = None

    @contextmanager
    def hold(self, *attempt_ids: int) -> Iterator[None]:
        """Keep the attempts fresh while the block runs (the provider call and commit)."""
        self.add(*attempt_ids)
        try:
            yield
        finally:
            self.discard(*attempt_ids)

    def add(self, *attempt_ids: int) -> None:
        with self._lock:
            self._open.update(attempt_ids)
            if self._beating is None or not self._beating.alive():
                self._beating = Periodic("revise-attempt-heartbeat", self._interval,
                                         self._beat).start()

    def discard(self, *attempt_ids: int) -> None:
        with self._lock:
            self._open.difference_update(attempt_ids)

    def _beat(self) -> bool | None:
        with self._lock:
            held = sorted(self._open)
            if not held:
                self._beating = None  # the next hold starts beating again
                return False
        try:
            self._store.heartbeat_attempts(held, owner=process_owner())
        except StoreUnavailable:
            log.warning("heartbeat failed for attempts %s", held)
        return None

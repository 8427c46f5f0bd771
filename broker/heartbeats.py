"""The heartbeat of open attempts: one UPDATE for all of a process's attempts, one thread.

A pending attempt whose heartbeat is older than ``attempt_lease_seconds`` is taken
for one whose owner is gone (``broker.crash_window``). While a provider call runs,
its owner renews the attempt every third of the lease. One thread per broker beats
every attempt the broker holds open in a single statement, instead of a thread and
an UPDATE per call.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from broker.errors import StoreUnavailable
from broker.store import RunStore

log = logging.getLogger("revise.heartbeats")


class AttemptHeartbeats:
    def __init__(self, store: RunStore, interval: float) -> None:
        self._store = store
        self._interval = max(interval, 0.5)
        self._open: set[int] = set()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @contextmanager
    def hold(self, attempt_id: int) -> Iterator[None]:
        """Keep ``attempt_id`` fresh while the block runs (the provider call and commit)."""
        with self._lock:
            self._open.add(attempt_id)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, daemon=True,
                                                name="revise-attempt-heartbeat")
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._open.discard(attempt_id)

    def _beat(self) -> None:
        while True:
            time.sleep(self._interval)
            with self._lock:
                held = sorted(self._open)
                if not held:
                    self._thread = None  # the next hold starts a new thread
                    return
            try:
                self._store.heartbeat_attempts(held)
            except StoreUnavailable:
                log.warning("heartbeat failed for attempts %s", held)

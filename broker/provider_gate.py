"""A provider's limits, honoured by a whole process: concurrency and Retry-After.

Each provider kind (images, text, ...) gets at most ``limit`` requests of this
process in flight at once (``REVISE_PROVIDER_CONCURRENCY``; the others wait their
turn before their request leaves), and once the provider answers 429 with a
Retry-After, no request of this process goes to it until that time has passed:
one rate-limited call makes every call of the process wait, so a broker with
hundreds of calls in flight backs off instead of hammering the provider.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ProviderGate:
    def __init__(self, limit: int | None = None) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._slots: dict[str, threading.BoundedSemaphore] = {}
        self._not_before: dict[str, float] = {}

    @contextmanager
    def turn(self, kind: str) -> Iterator[None]:
        """Wait until ``kind`` may be sent another request, and hold one of its slots."""
        slots = self._slots_of(kind)
        if slots is not None:
            slots.acquire()
        try:
            self.wait(kind)
            yield
        finally:
            if slots is not None:
                slots.release()

    def cool_down(self, kind: str, seconds: float) -> None:
        """The provider asked for a pause (Retry-After): nothing goes to it before then."""
        until = time.monotonic() + max(0.0, seconds)
        with self._lock:
            self._not_before[kind] = max(self._not_before.get(kind, 0.0), until)

    def wait(self, kind: str) -> None:
        """Until ``kind``'s cool-down (if any) has passed."""
        while True:
            with self._lock:
                left = self._not_before.get(kind, 0.0) - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, 1.0))

    def _slots_of(self, kind: str) -> threading.BoundedSemaphore | None:
        if self.limit is None:
            return None
        with self._lock:
            return self._slots.setdefault(kind, threading.BoundedSemaphore(self.limit))

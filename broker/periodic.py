"""One call repeated on a daemon thread until it says stop or is stopped: every heartbeat.

A heartbeat (an attempt's, a job lease's, a revision lease's, a broker worker's roster
entry) must outlive trouble with what it beats against: an exception is logged and the
beat comes again at the next interval. The beat's answer steers the loop: ``None`` (or
``True``) waits ``interval``; a number waits that many seconds instead (faster retries
while a store is away); ``False`` ends the thread (the lease was lost, nothing is left
to beat).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("revise.periodic")

Beat = Callable[[], "float | bool | None"]


class Periodic:
    def __init__(self, name: str, interval: float, beat: Beat, *,
                 first_after: float | None = None) -> None:
        """``beat`` runs ``first_after`` seconds after ``start`` (default ``interval``),
        then as its answers say."""
        self.name = name
        self._interval = interval
        self._beat = beat
        self._first_after = interval if first_after is None else first_after
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name=name)

    def start(self) -> Periodic:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def __enter__(self) -> Periodic:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        wait = self._first_after
        # A wait past threading's limit (a lease set to "never", 1e11 or inf) raises
        # OverflowError; waiting the limit (about 290 years) is the same thing.
        while not self._stop.wait(min(wait, threading.TIMEOUT_MAX)):
            try:
                answer = self._beat()
            except Exception as exc:  # the beat must outlive any trouble it meets
                log.warning("%s: beat failed: %s", self.name, exc)
                answer = None
            if answer is False:
                return
            wait = self._interval if answer is None or answer is True else float(answer)

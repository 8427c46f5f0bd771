"""The workloads of ``bench/peers.py``, one module per system.

Every peer answers the same five questions with its own idiom, timed from the
start of the work to its result (warm workers, nothing started on the clock):

* ``sequential(n)``: one workflow of ``n`` sequential no-op calls, seconds;
* ``fanout(n)``: one workflow of ``n`` parallel no-op calls, seconds;
* ``replay(n)``: re-run a recorded workflow of ``n`` calls from its record, seconds;
* ``concurrent(jobs, calls)``: ``jobs`` workflows of ``calls`` sequential calls at
  once, seconds for all;
* ``repair(n)``: an ``n``-way fanout whose branch ``FAILING_BRANCH`` sends a payload
  the provider rejects, then the repaired code recovers the run with the peer's own
  mechanism; the provider dispatch attempts of both, failed ones included.

``revise`` needs only this repository; ``temporal`` and ``dbos`` need the
``peers`` extra (``pip install -e '.[peers]'``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

FAILING_BRANCH = 1  # the second branch fails, as in the paper's DBOS fork probe
GOOD_SIZE, BAD_SIZE = "1024x1024", "999x999"


class ProviderStandIn:
    """The deterministic image provider of the repair workload: counts every dispatch
    attempt and rejects an unsupported size the way a real image API does."""

    def __init__(self) -> None:
        self.attempts = 0
        self._lock = threading.Lock()

    def call(self, prompt: str, size: str) -> dict[str, str]:
        with self._lock:
            self.attempts += 1
        if size != GOOD_SIZE:
            raise ValueError(f"unsupported size {size!r}")
        return {"prompt": prompt, "size": size}


class LoopThread:
    """One event loop on its own thread for an asyncio peer (its client and workers live
    on it for the whole run); ``run`` waits for a coroutine from the bench thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 600) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

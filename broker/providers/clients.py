"""HTTP clients for a provider adapter, one per request in flight.

httpcore's connection pool looks at every connection it holds for each request it
starts and each response it closes. One client shared by a broker worker's hundred
calls in flight made that quadratic: a third of the worker's CPU went to pool
bookkeeping. Here each request borrows a client of its own and gives it back, so a
pool holds one connection, which stays alive for the next request that borrows it.
No cap of its own: a provider's limit is REVISE_PROVIDER_CONCURRENCY
(``broker.provider_gate``), never a hidden pool size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx


class ClientPool:
    """Clients made by ``make`` on demand; as many exist as requests were ever in flight
    at once. An injected ``shared`` client (tests) serves every request instead."""

    def __init__(self, make: Callable[[], httpx.Client], shared: httpx.Client | None = None
                 ) -> None:
        # httpx imports httpcore (and httpcore trio, when installed) on the first client
        # it makes: about half a second of one core, which would land on a broker
        # worker's first calls in flight, every other first call waiting on the import
        # lock. A pool is made with its provider, which a broker worker builds as it
        # starts; the processes that never call a provider never import it.
        import httpcore  # noqa: F401
        self._make = make
        self._shared = shared
        self._lock = threading.Lock()
        self._idle: list[httpx.Client] = []
        self._made: list[httpx.Client] = []

    @property
    def made(self) -> int:
        """How many clients this pool made (and holds)."""
        with self._lock:
            return len(self._made)

    @contextmanager
    def client(self) -> Iterator[httpx.Client]:
        if self._shared is not None:
            yield self._shared
            return
        with self._lock:
            client = self._idle.pop() if self._idle else None
        if client is None:
            client = self._make()
            with self._lock:
                self._made.append(client)
        try:
            yield client
        finally:
            with self._lock:
                self._idle.append(client)  # last in, first out: its connection is warm

    def close(self) -> None:
        """Close the clients this pool made (an injected one is its owner's)."""
        with self._lock:
            made, self._made, self._idle = self._made, [], []
        for client in made:
            client.close()

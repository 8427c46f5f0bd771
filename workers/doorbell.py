"""The doorbell: a broker worker tells the side that asked that a call is settled.

The answer itself is in the run store, and only there (the committed slot, or the
attempt failed, uncertain or unresolved): the side that asked reads it back. The
doorbell only says *when* to read: a broker worker that settled an attempt publishes
its run and revision on the asker's channel (one Redis channel per sandbox worker
process, named in the capability task).

A ring can be lost only while the channel is not subscribed (Redis away, the first
moments of the listener) or when the publish itself fails. So whenever the
subscription is confirmed, and whenever it is lost, every waiter is rung: it reads
the store once, which finds whatever was settled meanwhile. ``listening`` says
whether the subscription stands; a waiter also reads the store on a slow period of
its own, for a publish that failed.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

log = logging.getLogger("revise.doorbell")

Key = tuple[str, int]  # (run id, revision)


def ring(client: redis.Redis, channel: str, run_id: str, revision: int) -> None:
    """Ring ``channel`` for the revision; a Redis that does not answer loses the ring
    (the waiter's poll finds the answer in the store)."""
    try:
        client.publish(channel, f"{revision} {run_id}")
    except redis.RedisError as exc:
        log.warning("could not ring %s for run %s: %s", channel, run_id, exc)


class Doorbell:
    """One channel and one listening thread per process; waiters wait per revision."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._redis = client
        self.channel = f"{prefix}{secrets.token_hex(8)}"
        self._lock = threading.Lock()
        self._waiters: dict[Key, set[threading.Event]] = {}
        self._thread: threading.Thread | None = None
        self.listening = False  # the channel's subscription is confirmed and stands

    @contextmanager
    def waiting(self, run_id: str, revision: int) -> Iterator[threading.Event]:
        """An event set whenever the revision's doorbell rings while the block runs.
        Register before asking, so no ring is missed."""
        event = threading.Event()
        key = (run_id, revision)
        with self._lock:
            self._waiters.setdefault(key, set()).add(event)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._listen, daemon=True,
                                                name="revise-doorbell")
                self._thread.start()
        try:
            yield event
        finally:
            with self._lock:
                events = self._waiters.get(key, set())
                events.discard(event)
                if not events:
                    self._waiters.pop(key, None)

    def _listen(self) -> None:
        delay = 0.5
        while True:
            pubsub = self._redis.pubsub()
            try:
                pubsub.subscribe(self.channel)
                while True:
                    message = pubsub.get_message(timeout=5.0)
                    if message is None:
                        continue
                    if message.get("type") == "subscribe":
                        self._ring_all()  # a ring sent before now may be lost: look once
                        self.listening, delay = True, 0.5
                    elif message.get("type") == "message":
                        self._rang(message.get("data"))
            except redis.RedisError as exc:  # waiters poll the store meanwhile
                self.listening = False
                self._ring_all()  # so they poll on the short period from now
                log.warning("doorbell %s lost its Redis (%s); listening again", self.channel,
                            exc)
                threading.Event().wait(delay)
                delay = min(delay * 2, 10.0)
            finally:
                pubsub.close()

    def _ring_all(self) -> None:
        with self._lock:
            events = [event for waiting in self._waiters.values() for event in waiting]
        for event in events:
            event.set()

    def _rang(self, data: object) -> None:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
        revision, _, run_id = text.partition(" ")
        if not revision.isdigit():
            return
        with self._lock:
            events = list(self._waiters.get((run_id, int(revision)), ()))
        for event in events:
            event.set()

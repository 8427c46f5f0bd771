"""kombu's Redis transport after a lost connection: a released channel says so with a
connection error instead of crashing the worker.

When Redis drops, Celery's consumer reconnects on a new channel, but work still in
flight holds the old one, whose connection kombu (5.7) has already released: the
ack of a task that finishes after the reconnect, the restore of unacknowledged
messages when the old channel closes. Each reads the released connection's
parameters and raises ``AttributeError`` ("'NoneType' object has no attribute
'hostname'"), which is not a connection error, so Celery logs "Unrecoverable error"
and the worker process exits: one Redis flap took a broker worker down for good.

Here every use of a released channel raises ``redis.ConnectionError``, which kombu
and Celery handle as designed: "Couldn't ack" is logged and the message comes back
(or, after a Redis loss, is gone and the store re-queues its job); a close finishes.
Nothing depends on that ack: the job lease makes a redelivered copy a no-op.

``share_clients``: kombu (5.7) also builds a new ``redis.Redis`` for every publish,
every event Flower reads, every ack and every delivery it records; redis-py 8 copies
its table of some 250 response callbacks into each, which was 6 to 8 % of a broker
worker's and of a dispatcher's CPU. A client is thread-safe (each command takes a
connection from the pool), so each channel keeps one for its current pool and makes
a new one only when the pool is replaced (after a connection loss).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

log = logging.getLogger("revise.workers")

_PATCHED = "_revise_released_channel"


class ReleasedChannel(redis.ConnectionError):
    """A Redis channel whose connection kombu already released after a connection loss."""


def tolerate_released_channels() -> None:
    from kombu.transport import redis as kombu_redis

    channel = kombu_redis.Channel
    if getattr(channel._connparams, _PATCHED, False):
        return
    connparams, close = channel._connparams, channel.close

    def checked_connparams(self: Any, *args: Any, **kwargs: Any) -> Any:
        transport = self.connection
        if transport is None or transport.client is None:
            raise ReleasedChannel("this Redis channel's connection was released after a "
                                  "connection loss; the consumer works on a new one")
        return connparams(self, *args, **kwargs)

    def tolerant_close(self: Any) -> None:
        try:
            close(self)
        except (ReleasedChannel, AttributeError) as exc:
            log.warning("closed a Redis channel whose connection was already released (%s); "
                        "its unacknowledged messages come back with the visibility timeout "
                        "or, after a Redis loss, their jobs are re-queued from the store", exc)

    setattr(checked_connparams, _PATCHED, True)
    channel._connparams = checked_connparams  # type: ignore[method-assign]
    channel.close = tolerant_close  # type: ignore[method-assign]


_SHARED = "_revise_shared_client"


def share_clients() -> None:
    from kombu.transport import redis as kombu_redis

    channel = kombu_redis.Channel
    if getattr(channel.conn_or_acquire, _PATCHED, False):
        return

    @contextmanager
    def conn_or_acquire(self: Any, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # a released channel raises here, as before
        shared = self.__dict__.get(_SHARED)
        if shared is None or shared.connection_pool is not pool:
            shared = self._create_client()
            self.__dict__[_SHARED] = shared
        yield shared

    setattr(conn_or_acquire, _PATCHED, True)
    channel.conn_or_acquire = conn_or_acquire  # type: ignore[method-assign]

"""A kombu Redis channel whose connection was released (what a Redis loss leaves to work
still in flight) fails with a connection error, never an AttributeError that kills the
worker ("Unrecoverable error"). Real Redis, real kombu; no Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu import Connection

from workers.kombu_redis import ReleasedChannel, share_clients, tolerate_released_channels

pytestmark = pytest.mark.redis


@pytest.fixture
def delivered(redis_url: str) -> Iterator[tuple[Connection, object, tuple]]:
    """A message delivered and not yet acknowledged, on a connection about to be lost."""
    tolerate_released_channels()
    share_clients()
    connection = Connection(redis_url)
    queue = connection.SimpleQueue("revise-released-channel-test")
    queue.put({"n": 1})
    message = queue.get(timeout=5)
    errors = connection.connection_errors
    try:
        yield connection, message, errors
    finally:
        queue.close()
        connection.release()


def _lose(connection: Connection, message: object) -> None:
    """The state a connection loss leaves (as traced in a worker that died on it): the
    transport released its client and the channel dropped its pools, while a message
    delivered on that channel is still being worked on."""
    connection._do_close_transport()
    message.channel._disconnect_pools()


def test_acknowledging_on_a_released_channel_is_a_connection_error(delivered) -> None:
    connection, message, errors = delivered
    _lose(connection, message)
    with pytest.raises(ReleasedChannel) as raised:
        message.ack()
    assert isinstance(raised.value, errors)  # kombu's ack_log_error logs it and goes on


def test_closing_a_released_channel_finishes(delivered) -> None:
    connection, message, _ = delivered
    channel = message.channel
    _lose(connection, message)
    channel.close()  # restores unacked messages: must not raise
    assert channel.closed


def test_the_patch_is_applied_once() -> None:
    from kombu.transport import redis as kombu_redis

    tolerate_released_channels()
    first = kombu_redis.Channel._connparams
    tolerate_released_channels()
    assert kombu_redis.Channel._connparams is first


def test_a_channel_shares_one_client_until_its_pool_is_replaced(redis_url: str,
                                                               monkeypatch) -> None:
    """kombu built a redis.Redis per publish, ack and recorded delivery; a channel now
    builds one for its pool, and a new one when a connection loss replaced the pool."""
    import redis

    share_clients()
    built: list[object] = []
    init = redis.Redis.__init__

    def counting(self, *args, **kwargs):
        built.append(self)
        init(self, *args, **kwargs)

    connection = Connection(redis_url)
    queue = connection.SimpleQueue("revise-shared-client-test")
    try:
        monkeypatch.setattr(redis.Redis, "__init__", counting)
        for n in range(5):
            queue.put({"n": n})
            queue.get(timeout=5).ack()
        channel = queue.channel
        assert len(built) <= 2, built  # the channel's one shared client (and BRPOP's)
        shared = channel.__dict__["_revise_shared_client"]
        assert shared.connection_pool is channel.pool
        channel._disconnect_pools()  # what a connection loss does to the channel
        queue.put({"n": "after"})
        assert queue.get(timeout=5).payload == {"n": "after"}
        renewed = channel.__dict__["_revise_shared_client"]
        assert renewed is not shared and renewed.connection_pool is channel.pool
    finally:
        monkeypatch.undo()
        queue.close()
        connection.release()


def test_sharing_is_applied_once() -> None:
    from kombu.transport import redis as kombu_redis

    share_clients()
    first = kombu_redis.Channel.conn_or_acquire
    share_clients()
    assert kombu_redis.Channel.conn_or_acquire is first

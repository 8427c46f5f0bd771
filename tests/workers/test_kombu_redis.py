"""A kombu Redis channel whose connection was released (what a Redis loss leaves to work
still in flight) fails with a connection error, never an AttributeError that kills the
worker ("Unrecoverable error"). Real Redis, real kombu; no Celery."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu import Connection

from workers.kombu_redis import ReleasedChannel, tolerate_released_channels

pytestmark = pytest.mark.redis


@pytest.fixture
def delivered(redis_url: str) -> Iterator[tuple[Connection, object, tuple]]:
    """A message delivered and not yet acknowledged, on a connection about to be lost."""
    tolerate_released_channels()
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

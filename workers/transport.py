"""What the Redis transport still holds: is a task's message queued or delivered?

Redis is the transport, not the truth (the store is). After a Redis loss a
message may be gone while the store still says its job was accepted; the
reconciler and the sandbox worker ask here before queueing a task again.
Kombu keeps a queue as a list per priority (``queue``, ``queue\\x06\\x163``, ...)
of JSON messages, and messages delivered but not yet acknowledged in the
``unacked`` hash.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

log = logging.getLogger("revise.transport")

_SEP = "\x06\x16"
_PRIORITIES = (3, 6, 9)
_UNACKED = "unacked"


def _lists(queue: str) -> list[str]:
    """The Redis lists kombu keeps ``queue`` in, one per priority."""
    return [queue, *(f"{queue}{_SEP}{priority}" for priority in _PRIORITIES)]


def _task_id(raw: bytes | str) -> str | None:
    try:
        message: Any = json.loads(raw)
    except ValueError:
        return None
    if isinstance(message, list) and message:  # unacked: [message, exchange, routing key]
        message = message[0]
    if not isinstance(message, dict):
        return None
    headers = message.get("headers") or {}
    return headers.get("id") or (message.get("properties") or {}).get("correlation_id")


class Transport:
    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def task_ids(self, queue: str, *, delivered: bool = True) -> set[str]:
        """Ids of the tasks queued on ``queue``, and (``delivered``) those delivered to any
        worker and not acknowledged yet."""
        ids: set[str] = set()
        with self._redis.pipeline(transaction=False) as pipe:
            for name in _lists(queue):
                pipe.lrange(name, 0, -1)
            if delivered:
                pipe.hvals(_UNACKED)
            for values in pipe.execute():
                ids.update(i for i in map(_task_id, values) if i is not None)
        return ids

    def waiting(self, queue: str) -> int:
        """How many messages wait on ``queue`` for a worker to take them (delivered ones
        not counted: a worker takes a message only when it has a free slot)."""
        with self._redis.pipeline(transaction=False) as pipe:
            for name in _lists(queue):
                pipe.llen(name)
            return sum(pipe.execute())

    def holds(self, queue: str, task_id: str) -> bool:
        return task_id in self.task_ids(queue)

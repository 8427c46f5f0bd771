"""Which broker workers are alive: a heartbeat per worker in one Redis sorted set.

Each broker worker (``-Q capabilities``) beats every third of the attempt lease
from a background thread. A sandbox job whose call is still queued asks how many
beat within the lease: none for a whole lease means nobody will take the call,
so the job stops fail-closed instead of holding its sandbox slot for the
``capability_wait_seconds`` bound. A Redis restart empties the set; workers
are back in it within a third of the lease, well inside the lease a waiter
gives them.
"""

from __future__ import annotations

import time

import redis

from broker.periodic import Periodic


class Roster:
    def __init__(self, client: redis.Redis, key: str) -> None:
        self._redis = client
        self._key = key

    def beat(self, name: str) -> None:
        self._redis.zadd(self._key, {name: time.time()})

    def alive(self, within: float) -> int:
        """Workers that beat within the last ``within`` seconds."""
        now = time.time()
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.zremrangebyscore(self._key, 0, now - 10 * within)  # long gone
            pipe.zcount(self._key, now - within, "+inf")
            return int(pipe.execute()[1])

    def keep_beating(self, name: str, interval: float) -> Periodic:
        return Periodic("broker-roster", interval, lambda: self.beat(name),
                        first_after=0).start()

"""The occurrence ledger in Redis (the deployment's ledger; embedded mode uses SQL).

Per (run, σ, π) one hash maps each committed payload digest to the first
revision that paid for it: ``HSETNX`` keeps the first revision, so a replayed
commit never moves it. Reads and writes are one round trip each; ``record``
takes an optional pipeline so a caller can group it with its own writes.

A Redis error fails closed (``LedgerUnavailable``, the call is not
dispatched) unless ``settings.ledger_fail_closed`` is off, in which case it
logs a warning and lets the call through: the explicit permissive opt-out.
"""

from __future__ import annotations

import json
import logging

import redis

from broker.errors import LedgerUnavailable
from broker.records import SlotRecord

log = logging.getLogger("revise.ledger")


class RedisLedger:
    def __init__(self, client: redis.Redis, *, fail_closed: bool = True,
                 prefix: str = "revise:ledger:") -> None:
        self._redis = client
        self._fail_closed = fail_closed
        self._prefix = prefix

    def key(self, run_id: str, site: str, path: tuple[int, ...]) -> str:
        # JSON keeps the three parts unambiguous whatever characters a run id holds.
        return self._prefix + json.dumps([run_id, site, list(path)], separators=(",", ":"))

    def seen(self, run_id: str, site: str, path: tuple[int, ...], digest: str,
             before_revision: int) -> bool:
        try:
            first = self._redis.hget(self.key(run_id, site, path), digest)
        except redis.RedisError as exc:
            self._unavailable("reading", exc)
            return False
        return first is not None and int(first) < before_revision

    def record(self, slot: SlotRecord, pipeline: redis.client.Pipeline | None = None) -> None:
        key = self.key(slot.run_id, slot.identity.site, slot.identity.path)
        try:
            if pipeline is not None:
                pipeline.hsetnx(key, slot.digest, slot.revision)
                return
            with self._redis.pipeline(transaction=True) as pipe:
                pipe.hsetnx(key, slot.digest, slot.revision)
                pipe.execute()
        except redis.RedisError as exc:
            self._unavailable("writing", exc)

    def _unavailable(self, action: str, exc: Exception) -> None:
        message = (f"the Redis occurrence ledger is unavailable while {action} ({exc}); "
                   "check that Redis answers at REVISE_REDIS_URL")
        if self._fail_closed:
            raise LedgerUnavailable(message + "; the call is not dispatched") from exc
        log.warning("%s; continuing because REVISE_LEDGER_FAIL_CLOSED=false", message)

"""The paid-payload ledger in Redis (the deployment's copy; the slots are the truth).

Per (run, capability, digest) one hash maps each identity that committed the
payload to its revision (``HSETNX``: a replayed commit never moves it). Redis
may lose keys (a restart without persistence, an eviction), so each run has a
marker key: while the marker is missing the run's entries are rebuilt from the
committed slots before the ledger answers, and a commit whose ledger write
failed is found there. Reads and writes are one round trip each.

A Redis error fails closed (``LedgerUnavailable``, the call is not dispatched; a call
that is already committed replays instead, see ``broker.dispatch``)
unless ``settings.ledger_fail_closed`` is off, in which case it logs a warning
and answers from the store: the explicit permissive opt-out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import redis

from broker.errors import LedgerUnavailable
from broker.identity import Identity
from broker.records import SlotRecord

log = logging.getLogger("revise.ledger")

Slots = Callable[[str], list[SlotRecord]]  # every committed slot of a run
Notice = Callable[[str, str, str], None]  # (run id, event kind, message)


class RedisLedger:
    def __init__(self, client: redis.Redis, *, slots: Slots, fail_closed: bool = True,
                 prefix: str = "revise:ledger:", on_event: Notice | None = None) -> None:
        """``on_event(run_id, kind, message)`` tells the run what happened to its ledger
        (entries missing and rebuilt from the slots), e.g. as a store event."""
        self._redis = client
        self._slots = slots
        self._fail_closed = fail_closed
        self._prefix = prefix
        self._on_event = on_event

    def _tell(self, run_id: str, kind: str, message: str) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(run_id, kind, message)
        except Exception as exc:  # telling is not worth failing a call over
            log.warning("could not record %s for run %s: %s", kind, run_id, exc)

    def key(self, run_id: str, capability: str, digest: str) -> str:
        # JSON keeps the parts unambiguous whatever characters they hold.
        return self._prefix + json.dumps([run_id, capability, digest], separators=(",", ":"))

    def _marker(self, run_id: str) -> str:
        return self._prefix + json.dumps([run_id, "built"], separators=(",", ":"))

    def paid(self, run_id: str, capability: str, digest: str,
             other_than: int) -> list[Identity]:
        key = self.key(run_id, capability, digest)
        try:
            with self._redis.pipeline(transaction=False) as pipe:  # one round trip
                pipe.exists(self._marker(run_id))
                pipe.hgetall(key)
                built, entries = pipe.execute()
            if not built:
                self.rebuild(run_id)
                entries = self._redis.hgetall(key)
        except redis.RedisError as exc:
            self._unavailable("reading", exc)
            return sorted(s.identity for s in self._slots(run_id)
                          if (s.capability, s.digest) == (capability, digest)
                          and s.revision != other_than)
        return sorted(Identity.parse(k.decode()) for k, v in entries.items()
                      if int(v) != other_than)

    def rebuild(self, run_id: str) -> int:
        """Write every committed slot of the run into the ledger; returns how many."""
        slots = self._slots(run_id)
        with self._redis.pipeline(transaction=True) as pipe:
            for slot in slots:
                pipe.hsetnx(self.key(run_id, slot.capability, slot.digest),
                            str(slot.identity), slot.revision)
            pipe.set(self._marker(run_id), 1)
            pipe.execute()
        if slots:
            log.info("ledger entries of run %s missing, rebuilt from %d committed slots",
                     run_id, len(slots))
            self._tell(run_id, "ledger_rebuilt", f"ledger entries missing (Redis lost them), "
                       f"rebuilt from {len(slots)} committed slots")
        return len(slots)

    def record(self, slot: SlotRecord) -> None:
        try:
            self._redis.hsetnx(self.key(slot.run_id, slot.capability, slot.digest),
                               str(slot.identity), slot.revision)
        except redis.RedisError as exc:
            # The slot is committed; a missing ledger entry is rebuilt from it, so this
            # never fails the call: say what happened instead.
            log.warning("ledger entry for %s in run %s missing (%s); it is rebuilt from the "
                        "committed slots", slot.identity, slot.run_id, exc)
            self._tell(slot.run_id, "ledger_entry_missing", f"the call at {slot.identity} is "
                       "paid and committed; its ledger entry is missing (Redis did not "
                       "answer) and is rebuilt from the slots")
            try:
                self._redis.delete(self._marker(slot.run_id))
            except redis.RedisError:
                pass

    def _unavailable(self, action: str, exc: Exception) -> None:
        pool = self._redis.connection_pool.connection_kwargs
        at = f"Redis at {pool.get('host', 'localhost')}:{pool.get('port', 6379)} (db " \
             f"{pool.get('db', 0)})"
        message = (f"the paid-payload ledger ({at}) is unavailable while {action} ({exc}); "
                   "check that Redis is running and answers at REVISE_REDIS_URL")
        if self._fail_closed:
            raise LedgerUnavailable(message + "; the call is not dispatched") from exc
        log.warning("%s; answering from the store because REVISE_LEDGER_FAIL_CLOSED=false",
                    message)

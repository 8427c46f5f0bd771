"""The paid-payload ledger: one contract over memory, SQL (the slots) and Redis (a copy
rebuilt from the slots when Redis lost it); Redis fails closed."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from broker.errors import LedgerUnavailable
from broker.identity import Identity
from broker.ledger import MemoryLedger, SqlLedger
from broker.records import SlotRecord
from broker.sqlstore import SqlStore
from workers.ledger_redis import RedisLedger

pytestmark = pytest.mark.redis

A = Identity("orchestrate/#0", (0,), 0)
B = Identity("orchestrate/#1>gen/#0", (), 0)


def _slot(identity: Identity, revision: int, digest: str = "d1",
          capability: str = "image.generate") -> SlotRecord:
    return SlotRecord(run_id="run-1", identity=identity, capability=capability, digest=digest,
                      fingerprint="fp", result={}, revision=revision)


@pytest.fixture(params=["memory", "sql", "redis"])
def ledger_and_commit(request, redis_url, sqlite_url):
    """(ledger, commit): ``commit`` stores a slot the way the broker does."""
    store = SqlStore.open(sqlite_url)
    store.ensure_run("run-1")
    if request.param == "memory":
        ledger = MemoryLedger()
    elif request.param == "sql":
        ledger = SqlLedger(store)
    else:
        ledger = RedisLedger(redis.Redis.from_url(redis_url), slots=store.list_slots)

    def commit(slot: SlotRecord) -> None:
        store.commit(slot, None)
        ledger.record(slot)

    yield ledger, commit
    store.close()


def test_the_ledger_is_run_wide_and_only_other_revisions_count(ledger_and_commit) -> None:
    ledger, commit = ledger_and_commit
    commit(_slot(A, 1))
    commit(_slot(B, 3))  # the same payload at another site, by another revision
    assert ledger.paid("run-1", "image.generate", "d1", other_than=1) == [B]
    assert ledger.paid("run-1", "image.generate", "d1", other_than=3) == [A]
    assert ledger.paid("run-1", "image.generate", "d1", other_than=9) == [A, B]
    assert ledger.paid("run-1", "image.generate", "d2", other_than=9) == []
    assert ledger.paid("run-1", "text.generate", "d1", other_than=9) == []
    assert ledger.paid("run-2", "image.generate", "d1", other_than=9) == []


def test_a_lost_redis_copy_is_rebuilt_from_the_slots(redis_url, sqlite_url) -> None:
    store = SqlStore.open(sqlite_url)
    try:
        store.ensure_run("run-1")
        client = redis.Redis.from_url(redis_url)
        ledger = RedisLedger(client, slots=store.list_slots)
        store.commit(_slot(A, 1), None)
        ledger.record(_slot(A, 1))
        store.commit(_slot(B, 1, digest="d2"), None)  # committed; its ledger write was lost
        client.flushdb()  # Redis restarted without persistence
        assert ledger.paid("run-1", "image.generate", "d2", 2) == [B]
        assert ledger.paid("run-1", "image.generate", "d1", 2) == [A]
    finally:
        store.close()


def test_an_outage_fails_closed_unless_opted_out(sqlite_url) -> None:
    store = SqlStore.open(sqlite_url)
    try:
        store.ensure_run("run-1")
        store.commit(_slot(A, 1), None)
        down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                           retry=Retry(NoBackoff(), 0))
        with pytest.raises(LedgerUnavailable):
            RedisLedger(down, slots=store.list_slots).paid("run-1", "image.generate", "d1", 2)
        permissive = RedisLedger(down, slots=store.list_slots, fail_closed=False)
        # The permissive opt-out answers from the store, never "nothing was paid".
        assert permissive.paid("run-1", "image.generate", "d1", 2) == [A]
        permissive.record(_slot(A, 1))  # warns, does not raise: the slot is committed
    finally:
        store.close()

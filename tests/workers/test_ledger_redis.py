"""The Redis occurrence ledger: same contract as the SQL/memory ledgers; fails closed."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from broker.errors import LedgerUnavailable
from broker.identity import Identity
from broker.ledger import MemoryLedger
from broker.records import SlotRecord
from workers.ledger_redis import RedisLedger

pytestmark = pytest.mark.redis


def _slot(revision: int, digest: str = "d1", path: tuple[int, ...] = (0,)) -> SlotRecord:
    return SlotRecord(run_id="run-1", identity=Identity("orchestrate/#0", path, revision),
                      capability="image.generate", digest=digest, fingerprint="fp",
                      result={}, revision=revision)


@pytest.mark.parametrize("kind", ["memory", "redis"])
def test_only_earlier_revisions_count_and_the_first_revision_sticks(kind, redis_url) -> None:
    ledger = MemoryLedger() if kind == "memory" else RedisLedger(redis.Redis.from_url(redis_url))
    ledger.record(_slot(1))
    ledger.record(_slot(3))  # a later commit of the same digest keeps revision 1
    assert ledger.seen("run-1", "orchestrate/#0", (0,), "d1", before_revision=2)
    assert not ledger.seen("run-1", "orchestrate/#0", (0,), "d1", before_revision=1)
    assert not ledger.seen("run-1", "orchestrate/#0", (1,), "d1", before_revision=9)
    assert not ledger.seen("run-1", "orchestrate/#0", (0,), "d2", before_revision=9)


def test_record_joins_the_callers_pipeline(redis_url) -> None:
    client = redis.Redis.from_url(redis_url)
    ledger = RedisLedger(client)
    with client.pipeline() as pipe:
        ledger.record(_slot(1), pipe)
        assert not ledger.seen("run-1", "orchestrate/#0", (0,), "d1", 2)
        pipe.execute()
    assert ledger.seen("run-1", "orchestrate/#0", (0,), "d1", 2)


def test_an_outage_fails_closed_unless_opted_out() -> None:
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2,
                       retry=Retry(NoBackoff(), 0))
    with pytest.raises(LedgerUnavailable):
        RedisLedger(down).seen("run-1", "s", (), "d", 2)
    permissive = RedisLedger(down, fail_closed=False)
    assert permissive.seen("run-1", "s", (), "d", 2) is False
    permissive.record(_slot(1))  # warns, does not raise

"""What one worker process holds open: store, Redis, provider, ledger, lease.

Built lazily on first use inside the process that runs tasks (after the
prefork pool forks), never at import time, so importing ``workers.app`` (the
client, ``celery inspect``, Flower) connects to nothing.
"""

from __future__ import annotations

import threading
from functools import cached_property

import redis

from broker.artifact_stores import open_artifact_store
from broker.artifacts import ArtifactStore
from broker.dispatch import Broker
from broker.envelope import Envelope
from broker.ledger import Ledger
from broker.providers import Provider, build_provider
from broker.settings import Settings
from broker.sqlstore import SqlStore
from sandbox.runner import Runner
from sandbox.select import select_runner
from workers.config import WorkerSettings
from workers.lease import JobLease
from workers.ledger_redis import RedisLedger
from workers.routing import Routing


class WorkerContext:
    def __init__(self, settings: Settings, queue: WorkerSettings) -> None:
        self.settings = settings
        self.queue = queue
        self.routing = Routing(queue.queue_prefix)
        self._lock = threading.Lock()

    @cached_property
    def store(self) -> SqlStore:
        with self._lock:
            self.settings.home.mkdir(parents=True, exist_ok=True)
            return SqlStore.open(self.settings.resolved_database_url)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.settings.redis_url, socket_timeout=10,
                                    socket_connect_timeout=5, health_check_interval=30)

    @cached_property
    def ledger(self) -> Ledger | None:
        """The Redis copy of the paid-payload ledger (None: the store answers alone)."""
        if self.settings.ledger_backend == "sql":
            return None
        return RedisLedger(self.redis, slots=self.store.list_slots,
                           fail_closed=self.settings.ledger_fail_closed,
                           prefix=f"revise:{self.queue.queue_prefix}ledger:")

    @cached_property
    def lease(self) -> JobLease:
        return JobLease(self.redis, ttl=self.queue.lease_seconds,
                        max_deliveries=self.queue.max_deliveries,
                        prefix=f"revise:{self.queue.queue_prefix}job:")

    @cached_property
    def artifacts(self) -> ArtifactStore:
        """The store the settings name: a deployment's database or S3, so every host reads
        what this worker wrote (``file`` keeps it on this host's HOME)."""
        return open_artifact_store(self.settings, self.store.engine)

    @cached_property
    def provider(self) -> Provider:
        return build_provider(self.settings, self.artifacts, latency=self.queue.local_latency)

    def broker(self, envelope: Envelope) -> Broker:
        return Broker(store=self.store, provider=self.provider, envelope=envelope,
                      settings=self.settings, ledger=self.ledger)

    @cached_property
    def runner(self) -> Runner:
        return select_runner(self.settings)

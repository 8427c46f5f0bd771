"""What one worker process holds open: store, Redis, provider, doorbell, lease.

Built lazily on first use inside the process that runs tasks (after the
prefork pool forks), never at import time, so importing ``workers.app`` (the
client, ``celery inspect``, Flower) connects to nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from functools import cached_property

import redis

from broker.artifact_spool import SpoolingArtifactStore
from broker.artifact_stores import open_artifact_store
from broker.artifacts import ArtifactStore
from broker.envelope import Envelope
from broker.heartbeats import AttemptHeartbeats
from broker.provider_gate import ProviderGate
from broker.providers import Provider, build_provider
from broker.settings import Settings
from broker.spend import Spender
from broker.spool import CommitSpool
from broker.sqlstore import SqlStore
from sandbox.runner import Runner
from sandbox.select import select_runner
from workers.config import WorkerSettings
from workers.doorbell import Doorbell
from workers.lease import JobLease
from workers.parking import QueueLoad
from workers.roster import Roster
from workers.routing import Routing
from workers.transport import Transport

log = logging.getLogger("revise.workers")


class WorkerContext:
    def __init__(self, settings: Settings, queue: WorkerSettings) -> None:
        self.settings = settings
        self.queue = queue
        self.routing = Routing(queue.queue_prefix)
        self._lock = threading.Lock()
        self._drainer: threading.Thread | None = None
        self._envelopes: dict[tuple[str, int], Envelope] = {}

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
    def broker_redis(self) -> redis.Redis:
        """The Celery transport's Redis (to see whether a message is still there)."""
        return redis.Redis.from_url(self.settings.resolved_broker_url, socket_timeout=10,
                                    socket_connect_timeout=5)

    @cached_property
    def brokers(self) -> Roster:
        """The broker workers that are alive (heartbeats in Redis)."""
        return Roster(self.redis, f"revise:{self.queue.queue_prefix}brokers")

    @cached_property
    def doorbell(self) -> Doorbell:
        """This process's doorbell: broker workers ring it when a call it asked for is
        settled (a sandbox worker's)."""
        return Doorbell(self.redis, f"revise:{self.queue.queue_prefix}doorbell:")

    @cached_property
    def sandbox_load(self) -> QueueLoad:
        """Whether jobs wait on the sandbox queue for a slot (what parks a waiting job
        sooner), looked up once a second for the whole process."""
        queue = self.routing.queue("sandbox")
        transport = Transport(self.broker_redis)
        return QueueLoad(lambda: transport.waiting(queue))

    @cached_property
    def gate(self) -> ProviderGate:
        """The provider limits every call of this process honours."""
        return ProviderGate(self.settings.provider_concurrency)

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

    @cached_property
    def heartbeats(self) -> AttemptHeartbeats:
        """One thread renews every attempt this process holds open."""
        return AttemptHeartbeats(self.store, self.settings.attempt_lease_seconds / 3)

    @cached_property
    def spool(self) -> CommitSpool:
        """One per process: a result kept in memory (no disk had room) waits here for the
        drain thread."""
        return CommitSpool(self.settings.spool_dir)

    def stored_envelope(self, run_id: str, revision: int) -> Envelope:
        """The envelope the revision was admitted under, from the run store (never from a
        queue message, which anyone who can write to Redis could forge). Cached: a
        revision's envelope never changes. A revision stored without one (written
        directly, not through the pipeline) runs under the defaults."""
        key = (run_id, revision)
        with self._lock:
            if key in self._envelopes:
                return self._envelopes[key]
        record = self.store.get_revision(run_id, revision)
        envelope = Envelope()
        if record is not None and record.envelope_digest is not None:
            data = self.store.get_blobs(run_id, [record.envelope_digest])
            envelope = Envelope.model_validate_json(data[record.envelope_digest])
        with self._lock:
            if len(self._envelopes) >= 1024:
                self._envelopes.clear()
            self._envelopes[key] = envelope
        return envelope

    def spender(self, envelope: Envelope) -> Spender:
        """Executes claimed calls of a revision admitted under ``envelope``."""
        return Spender(store=self.store, provider=self.provider, settings=self.settings,
                       call_timeout_seconds=envelope.call_timeout_seconds,
                       concurrency=envelope.concurrency, heartbeats=self.heartbeats,
                       spool=self.spool, gate=self.gate)

    def drain_spool_in_background(self) -> None:
        """Commit the paid results this host's spool holds, retrying until the store has
        them all (one thread per process; started on worker start and after a commit
        gave up)."""
        with self._lock:
            if self._drainer is not None and self._drainer.is_alive():
                return
            self._drainer = threading.Thread(target=self._drain, daemon=True,
                                             name="spool-drain")
            self._drainer.start()

    def _drain(self) -> None:
        """Until the spools are empty; the store (and with it the broker and a database
        artifact store) may not even open yet: every failure is one line and a retry."""
        delay = 1.0
        while True:
            try:
                kept = self.artifacts if isinstance(self.artifacts, SpoolingArtifactStore) \
                    else None
                if not self.spool.pending() and not (kept is not None and kept.pending()):
                    return
                if kept is not None:
                    kept.drain()  # the bytes first: a committed result points at them
                self.spender(Envelope()).drain_spool()
            except Exception as exc:
                log.warning("draining the commit spool failed (%s); trying again in %.0f s",
                            getattr(exc, "message", exc), delay)
            time.sleep(delay)
            delay = min(delay * 2, 30.0)

    @cached_property
    def runner(self) -> Runner:
        return select_runner(self.settings)

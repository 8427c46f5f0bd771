"""Settings from the environment (prefix ``REVISE_``); no module-level instance."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SandboxKind(StrEnum):
    DOCKER = "docker"
    PROCESS = "process"  # bubblewrap: own namespaces, seccomp, unprivileged uid
    PROCESS_WEAK = "process-weak"  # rlimits only; never chosen by auto, only when named
    AUTO = "auto"


class LedgerPolicy(StrEnum):
    OFF = "off"
    WARN = "warn"
    DENY = "deny"
    AUTO = "auto"


class Relocation(StrEnum):
    REMAP = "remap"
    STOP = "stop"


class OrphanPolicy(StrEnum):
    WARN = "warn"
    STOP = "stop"


class ArtifactStoreKind(StrEnum):
    FILE = "file"  # under HOME: one host only
    DATABASE = "database"  # the run store's database: every host of a deployment
    S3 = "s3"  # S3-compatible object storage


class RepairVia(StrEnum):
    EMBEDDED = "embedded"  # candidates run in this process (open_services)
    QUEUE = "queue"  # candidates go through the dispatcher to the workers
    AUTO = "auto"


def _state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "revise"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="REVISE_", extra="ignore")

    home: Path = Field(default=Path("./.revise"), description="state directory")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default SQLite (WAL) under HOME")
    redis_url: str = "redis://127.0.0.1:6379/0"
    celery_broker_url: str | None = None
    celery_result_backend: str | None = None
    sandbox: SandboxKind = SandboxKind.AUTO
    sandbox_image: str = "revise-sandbox:latest"
    sandbox_warm: int = Field(
        default=0, ge=0, le=32, description="pre-started sandboxes (Docker or process) kept ready "
        "for jobs with the default limits (one per job, never reused); worth it in "
        "long-lived workers")
    sandbox_pin: Path = Field(
        default_factory=lambda: _state_dir() / "sandbox-image.json",
        description="where the built sandbox image id is pinned; one per machine, not per "
        "HOME, because every HOME on the host runs the same image")
    ledger_policy: LedgerPolicy = LedgerPolicy.AUTO
    ledger_backend: str = Field(default="sql", description="sql | redis")
    orphan_policy: OrphanPolicy = OrphanPolicy.WARN
    relocation: Relocation = Field(
        default=Relocation.REMAP, description="remap: a committed call moved to a unique "
        "matching call expression replays there; stop: the paper's strict gate")
    unknown_outcome_retries: int = Field(
        default=2, ge=0, le=10, description="times one attempt asks the provider again "
        "under the same idempotency key: after a 429 (waiting its Retry-After, up to 30 s), "
        "and after a failure it may have charged for (5xx, timeout, lost connection) only "
        "when the provider honours keys; otherwise that attempt is uncertain: paid until "
        "an operator decides")
    provider_honours_idempotency_key: bool = Field(
        default=False, description="the HTTP provider deduplicates requests that carry the "
        "same Idempotency-Key: a failure it may have charged for is asked again with the "
        "key, and a later call for the same request in the run reuses it")
    # Fail-closed switch: the permissive opt-out is an explicit operator decision.
    ledger_fail_closed: bool = True
    attempt_lease_seconds: float = Field(
        default=30.0, gt=0, description="a pending attempt whose heartbeat (every third of "
        "this) is older than this is unresolved; on the owner's host a dead owner is seen "
        "at once")
    commit_retry_seconds: float = Field(
        default=600.0, ge=0, description="how long a broker worker retries the commit of a "
        "paid result while the store does not answer; the result is kept in the spool "
        "(HOME/spool, fsynced) meanwhile and after, until a worker commits it")
    revision_lease_seconds: float = Field(
        default=30.0, gt=0, description="a running revision whose owner (dispatcher, sandbox "
        "worker, embedded run) has not renewed its lease in the store for this long is "
        "lost: the reconciler marks it failed with the reason and the run resumable")
    requeue_after_seconds: float = Field(
        default=30.0, gt=0, description="an accepted job no sandbox worker started for this "
        "long whose queue message is gone (a Redis loss) is queued again by the reconciler")
    max_requeues: int = Field(
        default=3, ge=0, le=100, description="times the reconciler queues one lost job again "
        "before it marks the revision failed (lost: job message lost)")
    provider: str = Field(default="local", description="local | http")
    provider_base_url: str | None = None
    provider_api_key: SecretStr | None = None
    provider_timeout_seconds: float = 60.0
    provider_lookup_path: str | None = Field(
        default=None, description="where the HTTP provider answers what it did for an "
        "idempotency key, under the base URL, e.g. /requests/{key}: then an unresolved or "
        "uncertain attempt is resolved by asking it (the sweep, `revise reconcile "
        "--from-provider`)")
    model_base_url: str | None = None
    model_api_key: SecretStr | None = None
    model_name: str | None = None
    model_timeout_seconds: float = Field(
        default=120.0, gt=0, le=3600, description="one model request at most this long, "
        "connecting and reading the whole answer")
    model_retries: int = Field(
        default=3, ge=0, le=10, description="retries of a transient model endpoint failure "
        "(429, 5xx, timeout, dropped connection, malformed answer)")
    model_backoff_seconds: float = Field(
        default=1.0, ge=0, le=60, description="delay before the first retry; doubles for each "
        "further one (a Retry-After header wins, up to 60 s)")
    model_max_backoff_seconds: float = Field(default=30.0, ge=0, le=600)
    model_deadline_seconds: float = Field(
        default=300.0, gt=0, le=7200, description="one model answer, retries included, at "
        "most this long: no request starts after it and none runs past it")

    artifact_store: ArtifactStoreKind | None = Field(
        default=None, description="file | database | s3; default database when DATABASE_URL "
        "is PostgreSQL (every host reads it), else file under HOME")
    artifact_max_bytes: int = Field(
        default=64 << 20, ge=1, description="largest artifact a store accepts or hands out")
    s3_endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint (MinIO, Ceph, ...); none: AWS")
    s3_bucket: str | None = Field(default=None, description="bucket (must exist)")
    s3_prefix: str = Field(default="revise/artifacts/", description="key prefix")
    s3_region: str = "us-east-1"
    s3_access_key_id: str | None = None
    s3_secret_access_key: SecretStr | None = None
    repair_via: RepairVia = Field(
        default=RepairVia.AUTO, description="where `revise repair --execute` runs candidates; "
        "auto: queue when REDIS_URL or CELERY_BROKER_URL is set and the run store is "
        "PostgreSQL, else embedded")

    @field_validator("home", "sandbox_pin")
    @classmethod
    def _absolute(cls, path: Path) -> Path:
        """Sandboxes run elsewhere (another cwd, a container): paths must not be relative."""
        return path.expanduser().absolute()

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.home / 'revise.db').resolve()}"

    @property
    def run_store_is_shared(self) -> bool:
        """The run store is a server database (a deployment's), not a file under HOME."""
        return self.resolved_database_url.startswith("postgresql")

    @property
    def resolved_artifact_store(self) -> ArtifactStoreKind:
        if self.artifact_store is not None:
            return self.artifact_store
        return (ArtifactStoreKind.DATABASE if self.run_store_is_shared
                else ArtifactStoreKind.FILE)

    @property
    def resolved_repair_via(self) -> RepairVia:
        if self.repair_via is not RepairVia.AUTO:
            return self.repair_via
        configured = {"redis_url", "celery_broker_url"} & self.model_fields_set
        return RepairVia.QUEUE if configured and self.run_store_is_shared else RepairVia.EMBEDDED

    @property
    def resolved_broker_url(self) -> str:
        return self.celery_broker_url or self.redis_url

    @property
    def resolved_result_backend(self) -> str:
        return self.celery_result_backend or self.redis_url

    @property
    def provider_log_path(self) -> Path:
        return self.home / "provider-log.jsonl"

    @property
    def spool_dir(self) -> Path:
        return self.home / "spool"

    @property
    def artifacts_dir(self) -> Path:
        return self.home / "artifacts"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

"""Settings from the environment (prefix ``REVISE_``); no module-level instance.

A bad value is a ``ConfigError`` naming the variable (never a pydantic traceback).
``REVISE_DATABASE_URL`` accepts ``postgres://`` and ``postgresql://`` (the forms most
tools print) and means the project's driver by them (``postgresql+psycopg://``).
Every layer's settings derive from ``CheckedSettings``; which ``REVISE_*`` names are
read at all (and which are misspelt) is known only above every layer, in
``workers.variables``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from broker.errors import ConfigError

PREFIX = "REVISE_"
_HEADER_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}"  # RFC 9110 token, of a sane length
_REDIS_SCHEMES = frozenset({"redis", "rediss", "unix", "redis+socket", "sentinel"})
POSTGRES_DRIVER = "postgresql+psycopg"
DATABASE_URL_FORMS = (f"{POSTGRES_DRIVER}://USER:PASSWORD@HOST:5432/DB (postgres:// and "
                      "postgresql:// mean the same), or sqlite:///PATH")


class SettingsError(ConfigError, ValueError):
    """A setting's value is refused. A ValueError too, as pydantic's ValidationError was:
    callers that caught that keep working."""

    code = "settings_error"
    problems: list[str]  # one per refused variable: its name and why


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


class CheckedSettings(BaseSettings):
    """Settings whose refused values raise one ``SettingsError`` naming each variable
    (never pydantic's multi-line report): the base of every layer's settings."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise settings_error(exc, str(self.model_config.get("env_prefix", ""))) from None


class Settings(CheckedSettings):
    model_config = SettingsConfigDict(env_prefix=PREFIX, extra="ignore")

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
        "(its message lost, or its sandbox worker died) before it marks the revision "
        "failed (lost: ...)")
    provider: str = Field(default="local", description="local | http")
    provider_base_url: str | None = None
    provider_api_key: SecretStr | None = None
    provider_headers: SecretStr | None = Field(
        default=None, description="more headers every provider request carries, as a JSON "
        "object of name: value (a gateway's own key, e.g. {\"Helicone-Auth\": \"Bearer "
        "...\"}); masked like a key")
    provider_api_key_header: str = Field(
        default="Authorization", description="the header that carries the provider's key: "
        "Authorization sends 'Bearer KEY'; any other name (api-key for Azure OpenAI) sends "
        "the key as it is")
    provider_timeout_seconds: float = Field(
        default=180.0, gt=0, description="one provider request at most this long, from "
        "connect to the answer's last byte; an answer cut off may have been charged (an "
        "image model at high quality often takes over a minute: a shorter limit makes paid "
        "calls uncertain)")
    provider_concurrency: int | None = Field(
        default=None, ge=1, description="most requests one process sends to one provider "
        "kind (images, text) at once; the others wait their turn before their request leaves "
        "(so a provider's concurrency limit is honoured, never hammered); empty: no limit")
    provider_lookup_path: str | None = Field(
        default=None, description="where the HTTP provider answers what it did for an "
        "idempotency key, under the base URL, e.g. /requests/{key}: then an unresolved or "
        "uncertain attempt is resolved by asking it (the sweep, `revise reconcile "
        "--from-provider`)")
    model_base_url: str | None = None
    model_api_key: SecretStr | None = None
    model_headers: SecretStr | None = Field(
        default=None, description="more headers every model request carries, as "
        "REVISE_PROVIDER_HEADERS")
    model_api_key_header: str = Field(
        default="Authorization", description="the header that carries the model endpoint's "
        "key, as REVISE_PROVIDER_API_KEY_HEADER")
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

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, url: str | None) -> str | None:
        return None if url is None else normalize_database_url(url)

    @field_validator("provider_lookup_path")
    @classmethod
    def _names_the_key(cls, path: str | None) -> str | None:
        """A lookup path without ``{key}`` asks the same address for every call: its answer
        ("no record", so never charged) would decide calls it is not about."""
        if not path:
            return None  # unset (an empty variable too): the provider offers no lookup
        if not path.startswith("/") or "{key}" not in path:
            raise ValueError(f"{path!r} must be a path under the base URL that holds {{key}} "
                             "where the idempotency key goes, e.g. /requests/{key}")
        return path

    @field_validator("redis_url", "celery_broker_url", "celery_result_backend")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        """Redis is the ledger, the broker and the result backend: another scheme would be
        found out only when the first job is sent (Celery reads ``http://`` as no broker
        it knows; the ledger's client refuses it on first use)."""
        if url is None:
            return None
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in _REDIS_SCHEMES:
            raise ValueError(f"{mask_url(url)!r} is not a Redis URL; write "
                             "redis://HOST:PORT/DB (rediss:// for TLS, unix:///PATH for a "
                             "socket)")
        return url

    @field_validator("provider_api_key_header", "model_api_key_header")
    @classmethod
    def _header_name(cls, name: str) -> str:
        if not re.fullmatch(_HEADER_NAME, name):
            raise ValueError(f"{name!r} is not an HTTP header name (letters, digits and "
                             "-, e.g. Authorization or api-key)")
        return name

    @field_validator("provider_headers", "model_headers")
    @classmethod
    def _headers(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None or not value.get_secret_value().strip():
            return None
        header_map(value)  # refuses what is not a JSON object of header names to text
        return value

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


# ---- database URLs ---------------------------------------------------------------------


def normalize_database_url(url: str) -> str:
    """``postgres://`` and ``postgresql://`` become the project's driver URL; any other
    PostgreSQL driver and SQLite URLs stay as they are; anything else is a ValueError."""
    scheme, sep, rest = url.strip().partition("://")
    scheme = scheme.lower()
    if not sep or not rest:
        raise ValueError(f"not a database URL; use {DATABASE_URL_FORMS}")
    if scheme in ("postgres", "postgresql"):
        url = f"{POSTGRES_DRIVER}://{rest}"
    elif not (scheme.startswith("postgresql+") or scheme == "sqlite"
              or scheme.startswith("sqlite+")):
        raise ValueError(f"unknown scheme {scheme}://; use {DATABASE_URL_FORMS}")
    from sqlalchemy import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url).port  # noqa: B018 - a port that is not a number raises here
    except (ArgumentError, ValueError) as exc:
        raise ValueError(f"cannot be parsed ({str(exc).splitlines()[0]}); use "
                         f"{DATABASE_URL_FORMS}") from None
    return url


def mask_url(url: str) -> str:
    """The URL with the password inside it replaced by ***."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


# ---- errors and variable names ----------------------------------------------------------


def settings_error(exc: ValidationError, prefix: str) -> SettingsError:
    """One ConfigError naming each bad variable (its value is not echoed: it may be a
    secret)."""
    problems = []
    for error in exc.errors(include_url=False):
        name = prefix + "_".join(str(part) for part in error["loc"]).upper()
        problems.append(f"{name}: {str(error['msg']).removeprefix('Value error, ')}")
    return SettingsError("; ".join(problems), problems=problems)


def env_names(settings_class: type[BaseSettings]) -> list[str]:
    prefix = settings_class.model_config.get("env_prefix", "")
    return [f"{prefix}{name}".upper() for name in settings_class.model_fields]


# ---- problems between settings: what a role would refuse or start degraded with --------


# Headers Revise itself sets on a request (or the HTTP client does): never a setting's.
_OWN_HEADERS = frozenset({"idempotency-key", "content-type", "content-length", "host",
                          "accept-encoding", "transfer-encoding"})


def header_map(value: SecretStr | None) -> dict[str, str]:
    """The headers of REVISE_PROVIDER_HEADERS / REVISE_MODEL_HEADERS (ValueError naming
    what is wrong, never the values: they may be keys)."""
    if value is None:
        return {}
    try:
        parsed = json.loads(value.get_secret_value())
    except ValueError:
        raise ValueError('is not JSON; write an object such as {"X-Gateway-Key": "..."}'
                         ) from None
    if not isinstance(parsed, dict):
        raise ValueError('is not a JSON object; write {"Header-Name": "value", ...}')
    for name, text in parsed.items():
        if not re.fullmatch(_HEADER_NAME, name):
            raise ValueError(f"{name!r} is not an HTTP header name")
        if name.lower() in _OWN_HEADERS:
            raise ValueError(f"{name!r} is set by Revise itself; leave it out")
        if not isinstance(text, str) or any(c in text for c in "\r\n\0"):
            raise ValueError(f"the value of {name!r} is not one line of text")
    return parsed


def provider_ignored(settings: Settings) -> str | None:
    """An HTTP provider configured but not chosen: REVISE_PROVIDER is local (the default),
    so every call is answered by the local fake (free, made-up pictures) while the
    operator believes the real provider is called."""
    if settings.provider != "local":
        return None
    named = [name for name, value in (("REVISE_PROVIDER_BASE_URL", settings.provider_base_url),
                                      ("REVISE_PROVIDER_API_KEY", settings.provider_api_key))
             if value]
    if not named:
        return None
    return (f"{' and '.join(named)} {'are' if len(named) > 1 else 'is'} set but "
            "REVISE_PROVIDER is local: every call is answered by the local fake provider; "
            "set REVISE_PROVIDER=http to call that provider, or unset them")


def endpoint_in_base_url(url: str) -> str | None:
    """What a base URL holds that is not a prefix: an endpoint's path (pasted whole from
    an API's reference: every request would go to .../images/generations/images/...), a
    query or a fragment (each request's path would land inside it)."""
    address = url.split("#", 1)[0].split("?", 1)[0]
    if address != url:
        return "holds a query or fragment"
    path = address.rstrip("/")
    for endpoint in ("/images/generations", "/chat/completions", "/completions"):
        if path.endswith(endpoint):
            return f"ends with the endpoint {endpoint}"
    return None


def provider_problem(settings: Settings) -> str | None:
    """The broker workers' provider is configured, or the one line that says what is not."""
    url = settings.provider_base_url
    if settings.provider == "http" and not url:
        return ("REVISE_PROVIDER=http needs REVISE_PROVIDER_BASE_URL, e.g. "
                "https://api.openai.com/v1")
    if settings.provider == "http" and not url.startswith(("http://", "https://")):
        return (f"REVISE_PROVIDER_BASE_URL={url} is not an http(s) URL; write it with its "
                "scheme and API prefix, e.g. https://api.openai.com/v1")
    if settings.provider == "http" and (endpoint := endpoint_in_base_url(url)) is not None:
        return (f"REVISE_PROVIDER_BASE_URL={mask_url(url)} {endpoint}; write only the "
                "API's prefix (the part before /images/generations or /chat/completions), "
                "e.g. https://api.openai.com/v1")
    if settings.provider not in ("local", "http"):
        return f"REVISE_PROVIDER={settings.provider} is not a provider; use local or http"
    return None


def model_url_problem(url: str | None) -> str | None:
    """A model endpoint ``revise repair`` can talk to (None: fine, or none set)."""
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        return (f"model base URL {mask_url(url)!r} is not an http(s) URL; set "
                "REVISE_MODEL_BASE_URL with its scheme, e.g. http://127.0.0.1:4000/v1")
    if (endpoint := endpoint_in_base_url(url)) is not None:
        return (f"model base URL {mask_url(url)!r} {endpoint}; set REVISE_MODEL_BASE_URL "
                "to the API's prefix alone, e.g. http://127.0.0.1:4000/v1")
    return None


def provider_key_problem(settings: Settings) -> str | None:
    """An HTTP provider without a credential: OpenAI and Azure OpenAI refuse every request
    (401), found out only at each call. A gateway that carries its own key in
    REVISE_PROVIDER_HEADERS (the README's documented setup with no provider key) needs
    none."""
    key = settings.provider_api_key
    if settings.provider != "http" or settings.provider_headers is not None or (
            key is not None and key.get_secret_value()):
        return None
    return ("REVISE_PROVIDER=http needs REVISE_PROVIDER_API_KEY (the provider's key; "
            "REVISE_PROVIDER_API_KEY_HEADER=api-key for Azure OpenAI; any value, as "
            "vLLM's EMPTY, for a server that checks none), or REVISE_PROVIDER_HEADERS "
            "holding a gateway's own key")


# A full disk is no such problem: it passes, and a paid result waits in memory meanwhile.
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def home_problem(settings: Settings) -> str | None:
    """REVISE_HOME cannot be created or written: every role keeps state there (the SQLite
    store, the spool, the provider log, sandbox work dirs) and failed at its first use.
    Probed by making and removing a file in it (a directory beside it when it does not
    exist yet), so nothing is left behind and nothing is created."""
    home = settings.home
    existing = next(path for path in (home, *home.parents) if os.path.exists(path))
    verb, made = ("written", "a file") if existing == home else ("created", "a directory")
    if not existing.is_dir():
        verb, reason = ("used" if existing == home else verb), f"{existing} is not a directory"
    else:
        try:
            if existing == home:
                handle, probe = tempfile.mkstemp(dir=home, prefix=".revise-probe-")
                os.close(handle)
                os.unlink(probe)
            else:
                os.rmdir(tempfile.mkdtemp(dir=existing, prefix=".revise-probe-"))
            return None
        except OSError as exc:
            if exc.errno in _FULL:
                return None
            reason = f"making {made} in {existing} failed: {exc.strerror or exc}"
    return (f"REVISE_HOME={home} cannot be {verb} ({reason}); set REVISE_HOME to a "
            "directory this user can create and write, e.g. $PWD/.revise")

"""Typed settings of the Celery deployment (env prefix ``REVISE_CELERY_``).

The run-level settings (database, Redis, sandbox, policies) stay in
``broker.settings.Settings``; these are the knobs of the queue itself.
"""

from __future__ import annotations

import re

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from broker.settings import CheckedSettings

# What the Procfile can put unquoted into each worker's `-Q ${REVISE_CELERY_QUEUE_PREFIX}...`:
# a space splits the option, a shell character runs something else, a comma names two queues.
QUEUE_PREFIX_CHARACTERS = "letters, digits, '.', '_', ':' and '-'"
_QUEUE_PREFIX = re.compile(r"[A-Za-z0-9._:-]*")


class WorkerSettings(CheckedSettings):
    model_config = SettingsConfigDict(env_prefix="REVISE_CELERY_", extra="ignore", frozen=True,
                                      env_parse_none_str="none")

    queue_prefix: str = Field(
        default="", description="prepended to every queue name (one Redis, several stacks)")
    visibility_timeout: float = Field(
        default=3600.0, gt=0, description="seconds an unacknowledged message stays invisible "
        "before Redis delivers it again; the job lease makes a short value safe")
    unacked_restore_seconds: int | None = Field(
        default=None, ge=1, description="how often workers sweep overdue unacked messages "
        "back to their queue (kombu's default sweep is about 100 s)")
    lease_seconds: float = Field(
        default=30.0, gt=1, description="TTL of a job lease; the holder renews it every third")
    max_deliveries: int = Field(
        default=3, ge=1, description="starts of one job before it is failed as crashing")
    dispatch_time_limit: float = 120.0
    sandbox_time_limit: float = 3600.0
    capability_time_limit: float = 900.0
    capability_wait_seconds: float = Field(
        default=900.0, gt=0, description="how long a sandbox worker waits for one call's "
        "answer (queue wait + provider time) before it stops the run fail-closed")
    wave_chunk: int = Field(
        default=16, ge=1, le=64, description="new calls of one fanout wave sent to the broker "
        "workers as one capability task (claimed in one transaction); a wider wave is split "
        "into tasks of this many calls, so it spreads over broker workers")
    park_after_seconds: float | None = Field(
        default=30.0, ge=0, description="a sandbox job whose calls have all been in flight at "
        "broker workers for this long parks: its sandbox and its slot are given back, and it "
        "resumes (the admitted script again, its committed calls replayed) when they are "
        "settled; `none`: never park on time alone")
    park_under_load_after_seconds: float | None = Field(
        default=5.0, ge=0, description="parks sooner, after this long, to give its slot to a "
        "job that waits on the sandbox queue (one park for each such job); `none`: never park "
        "for load")
    reconcile_interval: float = Field(
        default=10.0, gt=0, description="seconds between the reconciler's sweeps for "
        "attempts and revisions whose worker died and jobs whose message was lost")
    local_latency: float = Field(
        default=0.0, ge=0, description="simulated latency of the local provider (tests and "
        "benchmarks only; ignored by real providers)")

    @field_validator("queue_prefix")
    @classmethod
    def _safe_prefix(cls, prefix: str) -> str:
        if not _QUEUE_PREFIX.fullmatch(prefix):
            raise ValueError(f"{prefix!r} holds a character a queue name in the Procfile "
                             f"cannot; use only {QUEUE_PREFIX_CHARACTERS}, e.g. stack1-")
        return prefix

    # ---- Redis retention (issue 29): what a finished run leaves in Redis, and how long -----
    result_expires_seconds: int = Field(
        default=24 * 3600, ge=60, description="how long Redis keeps a task's result (the "
        "job's answer for a waiting client, Flower's result column); the run store keeps "
        "the run for good")


# ---- Flower (issue 29: publishing it to other hosts) -------------------------------------


class FlowerSettings(CheckedSettings):
    """Where Flower listens and who may use it (env prefix ``REVISE_FLOWER_``), read by
    ``python -m workers.flower`` in the Procfile and compose.yaml."""

    model_config = SettingsConfigDict(env_prefix="REVISE_FLOWER_", extra="ignore",
                                      frozen=True)

    port: int = Field(default=5555, ge=1, le=65535, description="Flower's port")
    address: str = Field(
        default="127.0.0.1", min_length=1, description="the address Flower is reachable on "
        "(compose: the host address its port is published on); anything but a loopback "
        "address needs AUTH")
    auth: SecretStr | None = Field(
        default=None, description="user:password (several separated by commas): Flower's "
        "--basic-auth; compose passes an empty value when it is not set")

    @field_validator("auth", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("auth")
    @classmethod
    def _user_password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and any(":" not in pair or pair.startswith(":")
                                     for pair in value.get_secret_value().split(",")):
            raise ValueError("write user:password, several separated by commas")
        return value

    def unauthenticated_problem(self) -> str | None:
        """The line refusing a Flower reachable from other hosts without authentication."""
        if not self.exposed or self.auth is not None:
            return None
        return (f"Flower would be reachable from other hosts at {self.address} without "
                "authentication (it can shut workers down); set REVISE_FLOWER_AUTH="
                "user:password (Flower's basic auth; serve it over TLS) or Flower's --auth "
                "options, or keep REVISE_FLOWER_ADDRESS=127.0.0.1")

    @property
    def exposed(self) -> bool:
        """Reachable from other hosts: the address is not a loopback one."""
        import ipaddress

        if self.address == "localhost":
            return False
        try:
            return not ipaddress.ip_address(self.address.strip("[]")).is_loopback
        except ValueError:  # a host name: whatever it resolves to, treat it as public
            return True

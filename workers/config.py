"""Typed settings of the Celery deployment (env prefix ``REVISE_CELERY_``).

The run-level settings (database, Redis, sandbox, policies) stay in
``broker.settings.Settings``; these are the knobs of the queue itself.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from broker.settings import CheckedSettings


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
        default=5.0, ge=0, description="parks sooner, after this long, while another job "
        "waits on the sandbox queue for a slot; `none`: never park for load")
    reconcile_interval: float = Field(
        default=10.0, gt=0, description="seconds between the reconciler's sweeps for "
        "attempts and revisions whose worker died and jobs whose message was lost")
    local_latency: float = Field(
        default=0.0, ge=0, description="simulated latency of the local provider (tests and "
        "benchmarks only; ignored by real providers)")

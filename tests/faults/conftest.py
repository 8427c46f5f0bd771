"""The fault suite's stack: the Procfile's roles (``tests.workers.conftest.Stack``) on a
private PostgreSQL cluster and a private Redis, which the tests stop and start."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu.exceptions
import pytest
import redis

from tests.workers.conftest import Stack

from .services import PrivatePostgres, PrivateRedis

# Short leases so a fault is found within seconds; the visibility timeout keeps its
# default (3600 s): nothing here may depend on it.
SETTINGS = {"ATTEMPT_LEASE_SECONDS": 10, "REVISION_LEASE_SECONDS": 10,
            "REQUEUE_AFTER_SECONDS": 5, "MAX_REQUEUES": 3}
QUEUE = {"local_latency": 0.75, "reconcile_interval": 2}
ROLES = (("dispatch", "threads", 4), ("sandbox", "prefork", 2),
         ("capabilities", "threads", 8), ("reconcile", "threads", 1))


@pytest.fixture(scope="module")
def private_services(tmp_path_factory: pytest.TempPathFactory
                     ) -> Iterator[tuple[PrivatePostgres, PrivateRedis]]:
    root = tmp_path_factory.mktemp("services")
    postgres = PrivatePostgres()
    redis = PrivateRedis(root / "redis")
    try:
        postgres.start()
        redis.start()
        yield postgres, redis
    finally:
        redis.close()
        postgres.close()


class FaultStack(Stack):
    """``database``: a stack of its own on the shared private servers (one database each);
    ``roles``, ``role_env`` (extra environment per role) and ``worker_args`` (extra
    ``celery worker`` options per role) shape one test's stack."""

    def __init__(self, tmp_path: Path, postgres: PrivatePostgres, redis: PrivateRedis,
                 *, database: str = "revise_faults",
                 roles: tuple[tuple[str, str, int], ...] = ROLES,
                 role_env: dict[str, dict[str, str]] | None = None,
                 worker_args: dict[str, list[str]] | None = None) -> None:
        url = postgres.create_database(database)
        super().__init__(tmp_path, url, redis.url, **QUEUE)
        self.roles = roles
        self.role_env = dict(role_env or {})
        self.worker_args = dict(worker_args or {})
        self.postgres = postgres
        self.redis = redis
        for key, value in SETTINGS.items():
            self.env[f"REVISE_{key}"] = str(value)
        self.settings = self.settings.model_copy(
            update={key.lower(): value for key, value in SETTINGS.items()})
        self.client.settings = self.settings
        self.generation = 0

    def start_roles(self) -> None:
        self.current = {role: self.worker(role, pool=pool, concurrency=concurrency,
                                          index=self.generation, beat=role == "reconcile",
                                          env=self.role_env.get(role))
                        for role, pool, concurrency in self.roles}
        self.wait_ready(120)

    def _spawn(self, command: list[str] | str, log_name: str,
               env: dict[str, str] | None = None) -> Any:
        extra = self.worker_args.get(log_name.rstrip("0123456789"), [])
        if extra and isinstance(command, list):
            command = [*command, *extra]
        return super()._spawn(command, log_name, env)

    def dead_roles(self) -> list[str]:
        """Roles of the running generation whose worker process exited."""
        return [role for role, proc in self.current.items() if proc.poll() is not None]

    def wait_ready(self, timeout: float = 120.0) -> None:
        """The shared readiness wait (it names the roles still missing), through pooled
        connections that a Redis restart left dead."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return super().wait_ready(max(1.0, deadline - time.monotonic()))
            except (redis.RedisError, kombu.exceptions.OperationalError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)  # the failed connection reconnects on its next use

    def restart_roles(self) -> None:
        """After every worker was killed: the next generation, with its own names."""
        self.generation += 1
        self.names.clear()
        self.start_roles()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory,
          private_services: tuple[PrivatePostgres, PrivateRedis]) -> Iterator[Any]:
    postgres, redis = private_services
    built = FaultStack(tmp_path_factory.mktemp("stack"), postgres, redis)
    try:
        built.start_roles()
        yield built
    finally:
        built.stop()

"""Assemble the embedded product (no servers) from settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.artifact_stores import open_artifact_store
from broker.artifacts import ArtifactStore
from broker.dispatch import Broker
from broker.envelope import Envelope
from broker.errors import ConfigError
from broker.providers import Provider, build_provider
from broker.settings import Settings, home_problem
from broker.sqlstore import SqlStore
from orchestrator.pipeline import Pipeline
from sandbox.runner import Runner
from sandbox.select import select_runner


@dataclass
class Services:
    settings: Settings
    store: SqlStore
    provider: Provider
    artifacts: ArtifactStore
    runner: Runner | None = None

    def broker(self, envelope: Envelope) -> Broker:
        return Broker(store=self.store, provider=self.provider, envelope=envelope,
                      settings=self.settings)

    def pipeline(self) -> Pipeline:
        if self.runner is None:
            self.runner = select_runner(self.settings)
        return Pipeline(store=self.store, runner=self.runner, settings=self.settings,
                        executor_for=self.broker)

    def close(self) -> None:
        self.store.close()


def open_services(settings: Settings | None = None, *, runner: Runner | None = None,
                  latency: Any = None, read_only: bool = False) -> Services:
    """``read_only``: for commands that only read (the store is never migrated)."""
    settings = settings or Settings()
    make_home(settings)
    store = SqlStore.open(settings.resolved_database_url, migrate=not read_only)
    artifacts = open_artifact_store(settings, store.engine)
    provider = build_provider(settings, artifacts, latency=latency)
    return Services(settings=settings, store=store, provider=provider, artifacts=artifacts,
                    runner=runner)


def make_home(settings: Settings) -> None:
    """REVISE_HOME, created if missing; one that cannot be is a ConfigError naming it, in
    the words of `revise config --check`."""
    try:
        settings.home.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(home_problem(settings) or f"REVISE_HOME={settings.home} cannot be "
                          f"created ({exc.strerror})", setting="REVISE_HOME") from None

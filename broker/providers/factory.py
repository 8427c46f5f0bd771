"""Build the provider a broker uses, from settings.

Routing is by ``capability.provider``: ``images`` and ``text`` go to the local
provider or the HTTP adapters (``settings.provider``), ``dry-run`` to the
dry-run provider. The router is wrapped in ``LoggedProvider`` so every
execution lands in ``$REVISE_HOME/provider-log.jsonl``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from broker.artifacts import ArtifactStore
from broker.catalog import Capability
from broker.errors import ConfigError
from broker.providers.base import (
    CallContext,
    Lookup,
    Provider,
    ProviderResult,
    lookup_at,
    provider_error,
)
from broker.providers.dryrun import DryRunProvider
from broker.providers.http import OpenAIChatProvider, OpenAIImagesProvider
from broker.providers.local import Latency, LocalProvider
from broker.providers.log import LoggedProvider, ProviderLog
from broker.settings import Settings, header_map, provider_problem


class RoutingProvider:
    """Sends each capability to the provider registered for ``capability.provider``."""

    def __init__(self, routes: Mapping[str, Provider], *, name: str = "router") -> None:
        self.routes = dict(routes)
        self.name = name

    def provider_for(self, capability: Capability) -> Provider:
        try:
            return self.routes[capability.provider]
        except KeyError:
            raise ConfigError(
                f"no provider is configured for {capability.name} (provider kind "
                f"{capability.provider!r}); configured kinds: {', '.join(sorted(self.routes))}",
                capability=capability.name) from None

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        try:
            provider = self.provider_for(capability)
        except ConfigError as exc:
            raise provider_error(capability, call, exc.message, status=None,
                                 provider_code="no_provider") from None
        return provider.execute(capability, payload, call)

    def lookup(self, capability: Capability, payload: dict, call: CallContext) -> Lookup:
        """What the capability's provider did for the call's key (where it offers a
        lookup: ``REVISE_PROVIDER_LOOKUP_PATH``)."""
        return lookup_at(self.provider_for(capability), capability, payload, call)


def build_provider(settings: Settings, artifacts: ArtifactStore, *,
                   latency: Latency | None = None,
                   client: httpx.Client | None = None) -> Provider:
    """The logged, routed provider for ``settings`` (``client`` only for HTTP tests)."""
    kind = settings.provider
    if kind == "local":
        local = LocalProvider(artifacts, latency=latency if latency is not None else 0.0)
        routes: dict[str, Provider] = {"images": local, "text": local}
    elif kind == "http":
        problem = provider_problem(settings)
        if problem:
            raise ConfigError(problem)
        common: dict[str, Any] = {"base_url": settings.provider_base_url,
                  "api_key": settings.provider_api_key, "artifacts": artifacts,
                  "timeout": settings.provider_timeout_seconds, "client": client,
                  "lookup_path": settings.provider_lookup_path,
                  "api_key_header": settings.provider_api_key_header,
                  "extra_headers": header_map(settings.provider_headers)}
        routes = {"images": OpenAIImagesProvider(**common),
                  "text": OpenAIChatProvider(**common)}
    else:
        raise ConfigError(f"REVISE_PROVIDER={kind!r} is not a provider; use 'local' or 'http'")
    routes["dry-run"] = DryRunProvider(artifacts)
    return LoggedProvider(RoutingProvider(routes, name=kind),
                          ProviderLog(settings.provider_log_path))

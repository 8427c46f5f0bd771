"""Provider adapters: the only code that performs a capability's effect."""

from __future__ import annotations

from typing import TYPE_CHECKING

from broker.exports import lazy_exports

if TYPE_CHECKING:
    from broker.providers.base import CallContext, Lookup, Provider, ProviderResult, provider_error
    from broker.providers.dryrun import DryRunProvider
    from broker.providers.factory import RoutingProvider, build_provider
    from broker.providers.http import OpenAIChatProvider, OpenAIImagesProvider
    from broker.providers.local import SUPPORTED_SIZES, LocalProvider
    from broker.providers.log import LoggedProvider, ProviderLog

__all__ = [
    "SUPPORTED_SIZES",
    "CallContext",
    "DryRunProvider",
    "LocalProvider",
    "LoggedProvider",
    "Lookup",
    "OpenAIChatProvider",
    "OpenAIImagesProvider",
    "Provider",
    "ProviderLog",
    "ProviderResult",
    "RoutingProvider",
    "build_provider",
    "provider_error",
]
__getattr__ = lazy_exports(__name__, __file__)

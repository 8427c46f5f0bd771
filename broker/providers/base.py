"""The provider contract: one ``execute`` per real dispatch.

A provider answers with a :class:`ProviderResult` or raises
:class:`~broker.errors.CapabilityError` carrying provider-style fields
(``status``, ``provider_code``, ``retryable``) so the broker can record the
failure and the script can catch it by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from broker.catalog import Capability
from broker.errors import CapabilityError


@dataclass(frozen=True)
class CallContext:
    """Who is calling: the run, the call identity text, the provider idempotency key, and
    how long one provider request may take (the envelope's ``call_timeout_seconds``)."""

    run_id: str
    identity: str
    idempotency_key: str  # ``broker.identity.request_key``: one key per request
    timeout_seconds: float | None = None


@dataclass(frozen=True)
class ProviderResult:
    result: Any  # the JSON value handed to the script
    usage: dict[str, Any] = field(default_factory=dict)
    cost: float = 0.0


@dataclass(frozen=True)
class Lookup:
    """What a provider says it did for an idempotency key (``lookup``, where offered)."""

    state: str  # completed | unknown (no record: never received, never charged) | in_progress
    answer: ProviderResult | None = None


@runtime_checkable
class Provider(Protocol):
    name: str

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult: ...


def lookup_at(provider: Any, capability: Capability, payload: dict,
              call: CallContext) -> Lookup:
    """``provider.lookup(...)`` where it offers one; else a CapabilityError saying so."""
    ask = getattr(provider, "lookup", None)
    if ask is None:
        raise provider_error(capability, call, f"{capability.name}: the "
                             f"{getattr(provider, 'name', 'configured')} provider offers no "
                             "lookup by idempotency key", status=None,
                             provider_code="no_lookup")
    found: Lookup = ask(capability, payload, call)
    return found


def provider_error(capability: Capability, call: CallContext, message: str, *,
                   status: int | None, provider_code: str,
                   retryable: bool = False, **extra: Any) -> CapabilityError:
    """A CapabilityError with the fields every provider fills in (plus ``extra``)."""
    return CapabilityError(message, capability=capability.name, status=status,
                           provider_code=provider_code, retryable=retryable,
                           identity=call.identity, **extra)

"""May this run make this call? Grants, approvals, dry-run and the payload schema (pure).

The host asks before it decides a call and the broker asks again before it
spends: both call ``authorize``, which returns the capability and the payload
normalized by its schema (the input of the payload digest).
"""

from __future__ import annotations

from typing import Any

from broker.catalog import Capability, lookup
from broker.envelope import Envelope
from broker.errors import CapabilityDenied


def authorize(envelope: Envelope, name: str, payload: Any, *, identity: str
              ) -> tuple[Capability, dict[str, Any]]:
    try:
        capability = lookup(name)
    except CapabilityDenied as exc:
        raise CapabilityDenied(exc.message, identity=identity, capability=name) from None
    if capability.name not in envelope.grants:
        raise CapabilityDenied(
            f"{capability.name} is not granted by the envelope; add it to `grants`",
            identity=identity, capability=capability.name)
    if not capability.production and not envelope.dry_run:
        raise CapabilityDenied(
            f"{capability.name} is catalog-only and has no production provider; run with "
            "an envelope that sets dry_run: true to author against it",
            identity=identity, capability=capability.name)
    if envelope.needs_approval(capability.name):
        raise CapabilityDenied(
            f"{capability.name} requires an approval the envelope does not carry; add it "
            "to `approvals` once approved", identity=identity, capability=capability.name)
    try:
        normalized = capability.normalize(payload)
    except CapabilityDenied as exc:
        raise CapabilityDenied(exc.message, identity=identity, capability=capability.name,
                               field=exc.field) from None
    return capability, normalized

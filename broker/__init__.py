"""The runtime rule and everything under it: call identity and digests, the committed
prefix and the decision on each call, the broker (claim, provider, commit), the run store,
the paid-payload ledger, the capability catalog, envelopes, settings, artifacts and the
one error hierarchy. The layer every other one builds on; it imports none of them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from broker.exports import lazy_exports

# httpx imports its command-line client, and with it rich, pygments and click, whenever
# they are installed (the `revise` program needs rich): 6 MB in every process that
# imports httpx, five of them in the Procfile stack, for a program none of them runs.
# None in sys.modules makes that import fail as if they were missing (httpx then defines
# a `main` that says so). Every package of Revise imports this one first.
sys.modules.setdefault("httpx._main", None)

if TYPE_CHECKING:
    from broker.artifact_stores import open_artifact_store
    from broker.artifacts import ArtifactRef, ArtifactStore
    from broker.catalog import CATALOG, Capability, lookup
    from broker.dispatch import Broker
    from broker.envelope import Envelope, SandboxLimits, load_envelope
    from broker.errors import (
        BrokerError,
        CapabilityError,
        ConfigError,
        InputError,
        ReviseError,
        SafetyStop,
        SandboxError,
        StoreError,
        StoreUnavailable,
    )
    from broker.identity import Identity, call_digest, sha256_hex
    from broker.prefix import Prefix
    from broker.records import (
        AttemptRecord,
        AttemptStatus,
        JobStatus,
        RevisionRecord,
        RunStatus,
        SlotRecord,
    )
    from broker.settings import SandboxKind, Settings
    from broker.sqlstore import SqlStore
    from broker.store import RunStore

__all__ = [
    "CATALOG",
    "ArtifactRef",
    "ArtifactStore",
    "AttemptRecord",
    "AttemptStatus",
    "Broker",
    "BrokerError",
    "Capability",
    "CapabilityError",
    "ConfigError",
    "Envelope",
    "Identity",
    "InputError",
    "JobStatus",
    "Prefix",
    "ReviseError",
    "RevisionRecord",
    "RunStatus",
    "RunStore",
    "SafetyStop",
    "SandboxError",
    "SandboxKind",
    "SandboxLimits",
    "Settings",
    "SlotRecord",
    "SqlStore",
    "StoreError",
    "StoreUnavailable",
    "call_digest",
    "load_envelope",
    "lookup",
    "open_artifact_store",
    "sha256_hex",
]
__getattr__ = lazy_exports(__name__, __file__)

"""The run-wide paid-payload ledger: (run, capability, digest) -> where it was paid.

A call at a new identity whose normalized payload (and take) was already paid
anywhere in the run by another revision (an earlier one, or a concurrent one that
committed first) is a *semantic repeat*. The policy
decides what happens: off | warn | deny | auto (auto denies a side-effecting
capability and warns for a read-only one). A deliberate second take is
declared in the script (``ctx.run(..., take=2)``, part of the digest), never
inferred.

The revision's host decides from the prefix it loaded (``broker.prefix``); the
broker checks again in the claim transaction (SQL, authoritative). A ledger
here answers the same question for other readers: ``SqlLedger`` reads the
slots, ``workers.ledger_redis.RedisLedger`` keeps a copy in Redis that it
rebuilds from the slots whenever its copy of a run is missing.
"""

from __future__ import annotations

from collections import defaultdict
from enum import StrEnum
from typing import Protocol

from broker.catalog import Capability
from broker.identity import Identity
from broker.records import SlotRecord
from broker.settings import LedgerPolicy


class LedgerAction(StrEnum):
    NONE = "none"
    WARN = "warn"
    DENY = "deny"


def ledger_action(policy: LedgerPolicy, capability: Capability) -> LedgerAction:
    """auto: deny a repeat of a side-effecting capability, warn for a read-only one."""
    if policy is LedgerPolicy.OFF:
        return LedgerAction.NONE
    if policy is LedgerPolicy.WARN:
        return LedgerAction.WARN
    if policy is LedgerPolicy.DENY:
        return LedgerAction.DENY
    return LedgerAction.DENY if capability.side_effecting else LedgerAction.WARN


class Ledger(Protocol):
    def paid(self, run_id: str, capability: str, digest: str,
             other_than: int) -> list[Identity]: ...

    def record(self, slot: SlotRecord) -> None: ...


class PaidSlots(Protocol):
    def paid_identities(self, run_id: str, capability: str, digest: str,
                        other_than: int) -> list[Identity]: ...


class SqlLedger:
    """Embedded mode: the ledger is a query over committed slots."""

    def __init__(self, store: PaidSlots) -> None:
        self._store = store

    def paid(self, run_id: str, capability: str, digest: str,
             other_than: int) -> list[Identity]:
        return self._store.paid_identities(run_id, capability, digest, other_than)

    def record(self, slot: SlotRecord) -> None:
        """Nothing to do: the committed slot is the ledger entry."""


class MemoryLedger:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, str], dict[Identity, int]] = defaultdict(dict)

    def paid(self, run_id: str, capability: str, digest: str,
             other_than: int) -> list[Identity]:
        entries = self._entries.get((run_id, capability, digest), {})
        return sorted(i for i, revision in entries.items() if revision != other_than)

    def record(self, slot: SlotRecord) -> None:
        key = (slot.run_id, slot.capability, slot.digest)
        self._entries[key].setdefault(slot.identity, slot.revision)

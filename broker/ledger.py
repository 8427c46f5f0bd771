"""Occurrence ledger: per (run, σ, π) the payload digests committed by earlier revisions.

A call that misses on identity but hits the ledger is a semantic repeat (the
same site and path already paid for this exact payload). Only earlier
revisions count: a first run that loops over a constant payload is the
committed behaviour, and the ledger is about what a repair adds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from broker.catalog import Capability
from broker.records import SlotRecord
from broker.settings import LedgerPolicy
from broker.store import RunStore


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
    def seen(self, run_id: str, site: str, path: tuple[int, ...], digest: str,
             before_revision: int) -> bool: ...

    def record(self, slot: SlotRecord) -> None: ...


class SqlLedger:
    """Embedded mode: the ledger is a query over committed slots."""

    def __init__(self, store: RunStore) -> None:
        self._store = store

    def seen(self, run_id: str, site: str, path: tuple[int, ...], digest: str,
             before_revision: int) -> bool:
        return digest in self._store.ledger_digests(run_id, site, path, before_revision)

    def record(self, slot: SlotRecord) -> None:
        """Nothing to do: the committed slot is the ledger entry."""


class MemoryLedger:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str, tuple[int, ...]], dict[str, int]] = {}

    def seen(self, run_id: str, site: str, path: tuple[int, ...], digest: str,
             before_revision: int) -> bool:
        first = self._entries.get((run_id, site, path), {}).get(digest)
        return first is not None and first < before_revision

    def record(self, slot: SlotRecord) -> None:
        key = (slot.run_id, slot.identity.site, slot.identity.path)
        self._entries.setdefault(key, {}).setdefault(slot.digest, slot.revision)

"""Certificate: a hash chain over committed entries sorted by (site, path, occurrence)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.identity import canonical_json, sha256_hex
from broker.records import SlotRecord

GENESIS = sha256_hex("revise-certificate-v1")


def entry_of(slot: SlotRecord) -> dict[str, Any]:
    return {
        "site": slot.identity.site,
        "path": list(slot.identity.path),
        "occurrence": slot.identity.occurrence,
        "capability": slot.capability,
        "digest": slot.digest,
        "fingerprint": slot.fingerprint,
        "result": sha256_hex(canonical_json(slot.result)),
    }


def _key(entry: dict[str, Any]) -> tuple[str, list[int], int]:
    return (entry["site"], entry["path"], entry["occurrence"])


@dataclass(frozen=True)
class Certificate:
    digest: str
    entries: tuple[dict[str, Any], ...]
    differences: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "entries": len(self.entries),
                "differences": list(self.differences)}


def chain(entries: Iterable[dict[str, Any]]) -> str:
    head = GENESIS
    for entry in entries:
        head = sha256_hex(head + canonical_json(entry))
    return head


def build_certificate(slots: Iterable[SlotRecord]) -> Certificate:
    entries = sorted((entry_of(s) for s in slots), key=_key)
    return Certificate(digest=chain(entries), entries=tuple(entries))


def verify(persisted_digest: str, persisted_entries: list[dict[str, Any]],
           slots: Iterable[SlotRecord]) -> Certificate:
    """Recompute from the store; list every entry that was added, lost or changed."""
    current = build_certificate(slots)
    before = {tuple(map(str, _key(e))): e for e in persisted_entries}
    now = {tuple(map(str, _key(e))): e for e in current.entries}
    differences: list[dict[str, Any]] = []
    for key in sorted(before.keys() | now.keys()):
        old, new = before.get(key), now.get(key)
        if old == new:
            continue
        kind = "missing" if new is None else "added" if old is None else "changed"
        differences.append({"kind": kind, "site": key[0], "path": key[1],
                            "occurrence": int(key[2])})
    if not differences and chain(persisted_entries) != persisted_digest:
        differences.append({"kind": "digest_mismatch", "site": None, "path": None,
                            "occurrence": None})
    return Certificate(current.digest, current.entries, tuple(differences))

"""The static prefix gate (pure): decided before any container starts.

Every frozen site (a site with a committed occurrence) must be present in the
candidate, keep its capability and keep its call-expression fingerprint.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.errors import PrefixConflict
from broker.records import SlotRecord
from orchestrator.sites import Site


class CounterexampleKind(StrEnum):
    REMOVED = "removed"
    CAPABILITY_CHANGED = "capability_changed"
    CALL_CHANGED = "call_changed"


@dataclass(frozen=True)
class FrozenSite:
    site: str
    capability: str
    fingerprint: str
    occurrences: int


@dataclass(frozen=True)
class Counterexample:
    kind: CounterexampleKind
    site: str
    expected_capability: str
    found_capability: str | None = None
    line: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "site": self.site,
                "expected_capability": self.expected_capability,
                "found_capability": self.found_capability, "line": self.line}

    def describe(self) -> str:
        if self.kind is CounterexampleKind.REMOVED:
            return (f"frozen site {self.site} ({self.expected_capability}) is gone: a committed "
                    "call was removed, moved into a helper or wrapped in a new block; put the "
                    "call back exactly where it was")
        if self.kind is CounterexampleKind.CAPABILITY_CHANGED:
            return (f"frozen site {self.site} now calls {self.found_capability} instead of "
                    f"{self.expected_capability}; keep the committed capability")
        return (f"frozen site {self.site} (line {self.line}) changed its call expression; "
                "committed payload expressions are frozen: change the code around the call, "
                "or add a new call for new work")


@dataclass(frozen=True)
class GateResult:
    accepted: bool
    counterexamples: tuple[Counterexample, ...] = field(default_factory=tuple)
    frozen: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "frozen_sites": self.frozen,
                "counterexamples": [c.to_json() for c in self.counterexamples]}


def frozen_sites(slots: Iterable[SlotRecord]) -> dict[str, FrozenSite]:
    """The frozen prefix F from committed slot records; conflicting records raise."""
    frozen: dict[str, FrozenSite] = {}
    for slot in slots:
        site = slot.identity.site
        seen = frozen.get(site)
        if seen is None:
            frozen[site] = FrozenSite(site, slot.capability, slot.fingerprint, 1)
            continue
        if (seen.capability, seen.fingerprint) != (slot.capability, slot.fingerprint):
            raise PrefixConflict(
                f"committed records at site {site} disagree on capability or call expression; "
                "the store was changed outside Revise: run `revise certificate` to inspect",
                site=site)
        frozen[site] = FrozenSite(site, seen.capability, seen.fingerprint, seen.occurrences + 1)
    return frozen


def check_gate(frozen: Mapping[str, FrozenSite], candidate: Iterable[Site]) -> GateResult:
    by_site = {s.site: s for s in candidate}
    problems: list[Counterexample] = []
    for name in sorted(frozen):
        want = frozen[name]
        got = by_site.get(name)
        if got is None:
            problems.append(Counterexample(CounterexampleKind.REMOVED, name, want.capability))
        elif got.capability != want.capability:
            problems.append(Counterexample(CounterexampleKind.CAPABILITY_CHANGED, name,
                                           want.capability, got.capability, got.line))
        elif got.fingerprint != want.fingerprint:
            problems.append(Counterexample(CounterexampleKind.CALL_CHANGED, name,
                                           want.capability, got.capability, got.line))
    return GateResult(accepted=not problems, counterexamples=tuple(problems), frozen=len(frozen))

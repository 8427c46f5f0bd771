"""The static prefix gate (pure): decided before any container starts.

Every frozen site (a site with a committed occurrence) must be found in the
candidate with its capability and its call expression. A frozen site found in
place keeps its name. One that is not (removed, moved into a helper, wrapped in
a new block, re-ordinaled by an inserted call) is *relocated* to the candidate
site with the same capability and call expression when that match is unique on
both sides; the candidate's calls there then use the frozen site's name, so
they replay the committed slots (and only on an equal payload digest, which the
runtime checks). Ambiguous or missing matches stop the candidate.

``relocation="stop"`` keeps the paper's strict rule: no relocation at all.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from broker.errors import PrefixConflict
from broker.prefix import RACE
from broker.records import SlotRecord
from orchestrator.sites import Site


class CounterexampleKind(StrEnum):
    REMOVED = "removed"
    CAPABILITY_CHANGED = "capability_changed"
    CALL_CHANGED = "call_changed"
    AMBIGUOUS = "ambiguous"


@dataclass(frozen=True)
class FrozenSite:
    site: str
    capability: str
    fingerprint: str
    chain_fingerprint: str
    occurrences: int
    line: int | None = None  # where the committed call was, in the revision that committed it


@dataclass(frozen=True)
class Counterexample:
    kind: CounterexampleKind
    site: str
    expected_capability: str
    found_capability: str | None = None
    line: int | None = None
    committed_line: int | None = None
    candidates: tuple[str, ...] = ()
    movable: bool = True  # the gate relocates moved calls (REVISE_RELOCATION=remap)

    def to_json(self) -> dict[str, Any]:
        return {"kind": str(self.kind), "site": self.site,
                "expected_capability": self.expected_capability,
                "found_capability": self.found_capability, "line": self.line,
                "committed_line": self.committed_line, "candidates": list(self.candidates)}

    def describe(self) -> str:
        where = f" (committed at line {self.committed_line})" if self.committed_line else ""
        if self.kind is CounterexampleKind.REMOVED and self.expected_capability == RACE:
            return (f"frozen race {self.site}{where} is gone: the candidate has no ctx.race "
                    "that could be it; keep one ctx.race there (its branches may change, but "
                    "its committed winner must still be one of them)")
        if self.kind is CounterexampleKind.REMOVED and not self.movable:
            return (f"frozen site {self.site}{where} ({self.expected_capability}) is gone from "
                    "where it was committed, and REVISE_RELOCATION=stop keeps committed calls "
                    "where they are: leave the call there, with its call expression unchanged")
        if self.kind is CounterexampleKind.REMOVED:
            return (f"frozen site {self.site}{where} ({self.expected_capability}) is gone: no "
                    "call in the candidate has its capability and exact call expression; keep "
                    "the committed call expression unchanged (it may move, but only one call "
                    "may match it)")
        if self.kind is CounterexampleKind.CAPABILITY_CHANGED:
            return (f"frozen site {self.site}{where} now calls {self.found_capability} instead "
                    f"of {self.expected_capability}; keep the committed capability")
        if self.kind is CounterexampleKind.AMBIGUOUS:
            return (f"frozen site {self.site}{where} could be any of "
                    f"{', '.join(self.candidates)}: several calls now have its call expression; "
                    "keep exactly one call with that expression, or leave the committed call "
                    "where it was")
        return (f"frozen site {self.site}{where} changed its call expression at line "
                f"{self.line}; committed payload expressions are frozen: change the code "
                "around the call, or add a new call for new work")


@dataclass(frozen=True)
class Relocation:
    frozen: str  # the committed site
    site: str  # the candidate's site that now stands for it
    line: int  # the candidate's call
    committed_line: int | None

    def to_json(self) -> dict[str, Any]:
        return {"from": self.frozen, "to": self.site, "line": self.line,
                "committed_line": self.committed_line}


@dataclass(frozen=True)
class GateResult:
    accepted: bool
    counterexamples: tuple[Counterexample, ...] = field(default_factory=tuple)
    frozen: int = 0
    relocations: tuple[Relocation, ...] = field(default_factory=tuple)
    # The name each candidate site's calls are stored under (identity for most).
    storage: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "frozen_sites": self.frozen,
                "counterexamples": [c.to_json() for c in self.counterexamples],
                "relocations": [r.to_json() for r in self.relocations]}


def frozen_sites(slots: Iterable[SlotRecord]) -> dict[str, FrozenSite]:
    """The frozen prefix F from committed slot records; conflicting records raise."""
    frozen: dict[str, FrozenSite] = {}
    for slot in slots:
        site = slot.identity.site
        seen = frozen.get(site)
        if seen is None:
            frozen[site] = FrozenSite(site, slot.capability, slot.fingerprint,
                                      slot.chain_fingerprint or slot.fingerprint, 1, slot.line)
            continue
        if (seen.capability, seen.fingerprint) != (slot.capability, slot.fingerprint):
            raise PrefixConflict(
                f"committed records at site {site} disagree on capability or call expression; "
                "the store was changed outside Revise: run `revise certificate` to inspect",
                site=site)
        frozen[site] = FrozenSite(site, seen.capability, seen.fingerprint,
                                  seen.chain_fingerprint, seen.occurrences + 1, seen.line)
    return frozen


def _same_call(frozen: FrozenSite, site: Site) -> bool:
    return _call_of(frozen) == _call_of(site)


def _call_of(site: FrozenSite | Site) -> tuple[str, str | None]:
    """What a frozen call must find again: its capability and exact call expression. A race
    is frozen by its winner (checked when it runs), not by its branch list."""
    return site.capability, None if site.capability == RACE else site.fingerprint


class _Matcher:
    def __init__(self, frozen: Mapping[str, FrozenSite], candidate: Iterable[Site]) -> None:
        self.frozen = frozen
        self.candidate = {s.site: s for s in candidate}
        self.bound: dict[str, str] = {}  # frozen site -> candidate site
        self.taken: set[str] = set()

    def bind(self, frozen: str, site: str) -> None:
        self.bound[frozen] = site
        self.taken.add(site)

    def open_frozen(self) -> list[FrozenSite]:
        return [self.frozen[n] for n in sorted(self.frozen) if n not in self.bound]

    def in_place(self, strict_chain: bool) -> None:
        for want in self.open_frozen():
            got = self.candidate.get(want.site)
            if got is None or got.site in self.taken or not _same_call(want, got):
                continue
            if strict_chain and got.chain_fingerprint != want.chain_fingerprint:
                continue
            self.bind(want.site, got.site)

    def unique(self, key: Any) -> None:
        """Bind frozen sites to candidates that share ``key(site)``, one to one only."""
        wanted: dict[Any, list[FrozenSite]] = defaultdict(list)
        for want in self.open_frozen():
            wanted[key(want)].append(want)
        offered: dict[Any, list[Site]] = defaultdict(list)
        for got in self.candidate.values():
            if got.site not in self.taken:
                offered[key(got)].append(got)
        for value, wants in wanted.items():
            gots = offered.get(value, [])
            if len(wants) == 1 and len(gots) == 1:
                self.bind(wants[0].site, gots[0].site)


def check_gate(frozen: Mapping[str, FrozenSite], candidate: Iterable[Site], *,
               relocation: str = "remap") -> GateResult:
    sites = list(candidate)
    matcher = _Matcher(frozen, sites)
    matcher.in_place(strict_chain=True)
    if relocation != "stop":
        matcher.unique(lambda s: (*_call_of(s), s.chain_fingerprint))
        matcher.unique(_call_of)
    matcher.in_place(strict_chain=False)
    problems = [_counterexample(matcher, want, movable=relocation != "stop")
                for want in matcher.open_frozen()]
    relocations = tuple(
        Relocation(f, s, matcher.candidate[s].line, frozen[f].line)
        for f, s in sorted(matcher.bound.items()) if f != s)
    return GateResult(accepted=not problems, counterexamples=tuple(problems),
                      frozen=len(frozen), relocations=relocations,
                      storage=_storage_names(matcher, sites))


def _counterexample(matcher: _Matcher, want: FrozenSite, *, movable: bool
                    ) -> Counterexample:
    same = sorted(s.site for s in matcher.candidate.values()
                  if s.site not in matcher.taken and _same_call(want, s))
    got = matcher.candidate.get(want.site)
    if movable and len(same) > 1:
        return Counterexample(CounterexampleKind.AMBIGUOUS, want.site, want.capability,
                              committed_line=want.line, candidates=tuple(same))
    if got is None or got.site in matcher.taken:
        return Counterexample(CounterexampleKind.REMOVED, want.site, want.capability,
                              committed_line=want.line, candidates=tuple(same),
                              movable=movable)
    kind = (CounterexampleKind.CAPABILITY_CHANGED if got.capability != want.capability
            else CounterexampleKind.CALL_CHANGED)
    return Counterexample(kind, want.site, want.capability, got.capability, got.line,
                          committed_line=want.line)


def _storage_names(matcher: _Matcher, sites: list[Site]) -> dict[str, str]:
    """Relocated sites take the frozen name; a new site whose own name is frozen for
    another call gets a suffix from its chain fingerprint (stable across revisions)."""
    storage = {site: frozen for frozen, site in matcher.bound.items()}
    used = set(matcher.frozen) | set(storage.values())
    for site in sites:
        if site.site in storage:
            continue
        name = site.site
        if name in used:
            name = f"{site.site}~{site.chain_fingerprint[:8]}"
            counter = 2
            while name in used:
                name = f"{site.site}~{site.chain_fingerprint[:8]}.{counter}"
                counter += 1
        storage[site.site] = name
        used.add(name)
    return storage

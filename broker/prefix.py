"""The committed prefix as one revision sees it, and the decision on each call (pure).

A revision loads the run's committed slots once. Every call it makes is decided
here, before anything is dispatched:

1. **replay**: the slot at the call's identity holds the same capability and
   payload digest, and this revision has not used it yet;
2. **relocated**: exactly one unused slot holds the same capability, call
   expression (fingerprint) and payload digest: a shifted occurrence, a shifted
   fanout path, a swapped caller. The same call, so its result is reusable;
3. **divergence**: the slot at the call's identity holds another payload (or
   capability) and still stands there: the committed call was edited; the run
   stops before any effect;
   **used**: the slot at the call's identity holds this very call, but this
   revision already handed its result to another call (a relocation): nothing
   can be paid at a committed identity, so the run stops too;
4. **repeat**: this (capability, digest) was already paid earlier in the run at
   another identity (another call expression, or a slot already used), or is asked
   for at another identity by this revision (a new call not answered as a free
   failure): the ledger policy decides (see ``broker.ledger``);
5. **new**: nothing committed matches: new work for the broker. When this
   revision already handed the result committed at the call's identity to a
   moved call (the same expression with another payload lands where that one
   was), the committed call is not edited, it moved: the new work is stored
   aside (``Identity.moved_aside``) and the committed slot stays as it is.

Calls of one wave are decided together: exact identities first, then the
calls that relocate to exactly one slot, then the rest in order; so a
relocation never takes the slot that a call of the same wave owns, and a call
that lands where a moved call of its wave was committed is new work, whatever
the order of the wave. Each slot serves at most one call per revision: a result
is never handed to two calls.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum

from broker.identity import Identity
from broker.records import SlotRecord

RACE = "ctx.race"


@dataclass(frozen=True)
class Call:
    """One call as the host decides it (its identity is the storage identity)."""

    identity: Identity
    capability: str
    digest: str  # call_digest of the normalized payload and its take
    fingerprint: str  # of the call expression


class Verdict(StrEnum):
    REPLAY = "replay"
    RELOCATED = "relocated"
    DIVERGE = "diverge"
    USED = "used"
    REPEAT = "repeat"
    NEW = "new"


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    slot: SlotRecord | None = None  # the slot replayed, in the way, or paid before
    asked_at: Identity | None = None  # a repeat of a new call of this revision
    stored_at: Identity | None = None  # new work stored aside of its identity

    @property
    def replays(self) -> bool:
        return self.verdict in (Verdict.REPLAY, Verdict.RELOCATED)


class Prefix:
    def __init__(self, slots: Iterable[SlotRecord], *, revision: int) -> None:
        self.revision = revision
        self.slots: dict[Identity, SlotRecord] = {}
        self.races: dict[Identity, SlotRecord] = {}
        self._by_call: dict[tuple[str, str, str], list[SlotRecord]] = defaultdict(list)
        self._paid: dict[tuple[str, str], list[SlotRecord]] = defaultdict(list)
        for slot in sorted(slots, key=lambda s: s.identity):
            if slot.capability == RACE:
                self.races[slot.identity] = slot
                continue
            self.slots[slot.identity] = slot
            self._by_call[(slot.capability, slot.fingerprint, slot.digest)].append(slot)
            self._paid[(slot.capability, slot.digest)].append(slot)
        self.used: set[Identity] = set()
        self.invoked: set[Identity] = set()
        # The new calls of this revision, by request, until one is answered as a free
        # failure (which paid nothing): a second ask for one of them is a repeat.
        self._asked: dict[tuple[str, str], Identity] = {}
        self._asked_at: dict[Identity, tuple[str, str]] = {}

    def __len__(self) -> int:
        return len(self.slots) + len(self.races)

    def decide_wave(self, calls: list[Call]) -> list[Decision]:
        """Decide every call of a wave: exact identities, then unique relocations, then
        the rest in order."""
        decisions: list[Decision | None] = [self._exact(call) for call in calls]
        decisions = [d if d is not None else self._relocated(call)
                     for call, d in zip(calls, decisions, strict=True)]
        return [d if d is not None else self._other(call) for call, d in zip(
            calls, decisions, strict=True)]

    def decide(self, call: Call) -> Decision:
        return self._exact(call) or self._other(call)

    def _exact(self, call: Call) -> Decision | None:
        slot = self.slots.get(call.identity)
        if (slot is None or call.identity in self.used or slot.fingerprint != call.fingerprint
                or not slot.same_call(call.capability, call.digest)):
            return None
        return self._use(slot, Verdict.REPLAY)

    def _relocated(self, call: Call) -> Decision | None:
        moved = [s for s in self._by_call.get((call.capability, call.fingerprint, call.digest),
                                              ()) if s.identity not in self.used]
        return self._use(moved[0], Verdict.RELOCATED) if len(moved) == 1 else None

    def _other(self, call: Call) -> Decision:
        relocated = self._relocated(call)
        if relocated is not None:
            return relocated
        stored_at = call.identity
        own = self.slots.get(call.identity)
        if own is not None:
            self.invoked.add(own.identity)
            same_expression = (own.capability, own.fingerprint) == (call.capability,
                                                                     call.fingerprint)
            if own.identity not in self.used or not same_expression:
                return Decision(Verdict.DIVERGE, own)
            if own.digest == call.digest:
                return Decision(Verdict.USED, own)  # its slot already served another call
            stored_at = call.identity.moved_aside(self.revision)
        paid = self._paid.get((call.capability, call.digest))
        if paid:
            return Decision(Verdict.REPEAT, paid[0])
        asked = self._asked.setdefault((call.capability, call.digest), stored_at)
        if asked != stored_at:
            return Decision(Verdict.REPEAT, asked_at=asked)
        self._asked_at[stored_at] = (call.capability, call.digest)
        return Decision(Verdict.NEW, stored_at=stored_at if own is not None else None)

    def answered_free(self, identity: Identity) -> None:
        """The new call at ``identity`` failed and the provider did not charge: asking for
        its request again is not a repeat."""
        key = self._asked_at.pop(identity, None)
        if key is not None and self._asked.get(key) == identity:
            del self._asked[key]

    def _use(self, slot: SlotRecord, verdict: Verdict) -> Decision:
        self.used.add(slot.identity)
        self.invoked.add(slot.identity)
        return Decision(verdict, slot)

    def race(self, identity: Identity, fits: Callable[[SlotRecord], bool]
             ) -> SlotRecord | None:
        """The committed decision of the race at ``identity``. ``fits`` says whether a
        committed race's winner is among this race's branches. The race's own decision
        when it fits; else the one unused committed race of the same site that fits (a
        race that moved: another fanout path or occurrence, or two races that swapped);
        else its own decision all the same (its winner is gone: the caller stops), or
        None when nothing is committed for it."""
        own = self.races.get(identity)
        if own is not None and identity in self.used:
            own = None
        if own is None or not fits(own):
            moved = [s for i, s in self.races.items()
                     if i.site == identity.site and i not in self.used and fits(s)]
            if len(moved) == 1:
                own = moved[0]
        if own is not None:
            self.used.add(own.identity)
            self.invoked.add(own.identity)
        return own

    def reached_race_branches(self, race: Identity, sites: set[str]) -> None:
        """A replayed race runs only its winner; the committed first calls of its losing
        branches (same race, branch sites) were reached all the same: not orphans."""
        depth = len(race.path) + 1
        for identity in self.slots:
            if (identity.site in sites and len(identity.path) == depth
                    and identity.path[:-1] == race.path):
                self.invoked.add(identity)

    def orphans(self) -> list[Identity]:
        """Committed identities this revision never reached."""
        frozen = set(self.slots) | set(self.races)
        return sorted(frozen - self.invoked)

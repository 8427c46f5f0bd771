"""What a repair prompt is built from, read from the store (again after a candidate ran).

The failed revision and its structured error, the script that committed the
prefix, every committed identity with its capability and the payload that
reached it (stored by digest when the call went to the broker), the failed
calls with theirs, the failed script's call expressions and how many calls of each
capability it can make (for the call-count guard), the run's args, and where each
site sits in the failed script (for quoting lines and naming fanout elements).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from broker.errors import AnnotationError, InputError, RunBusy
from broker.identity import Identity
from broker.prefix import RACE
from broker.records import RevisionRecord, RevisionStatus, SlotRecord
from broker.store import RunStore
from broker.syntax import parse_python
from orchestrator.checker.reach import Reach
from orchestrator.fanout_paths import Fanout, fanouts
from orchestrator.gate import FrozenSite, check_gate, frozen_sites
from orchestrator.inputs import MISSING, resolve_inputs
from orchestrator.sites import Site, assign_sites, site_table, unwrap_at


@dataclass(frozen=True)
class SourceLine:
    """A call in a script, with its text (for the prompt)."""

    line: int
    text: str
    where: str = "the failed script"  # or "revision N" when the failed script lacks it


@dataclass(frozen=True)
class CallExpression:
    """One capability call expression in a script's source."""

    capability: str
    fingerprint: str
    line: int
    text: str


@dataclass(frozen=True)
class CapabilityCalls:
    """How many calls of one capability a script can make in one revision: the sum of
    the static bounds of its sites (``Site.max_calls``: a loop over a literal list of 3
    is 3 calls, ``range(n)`` with a literal ``n`` is n), None when a site has no static
    bound (a while loop, iteration over the run's input)."""

    capability: str
    at_most: int | None
    expressions: tuple[CallExpression, ...]  # its call expressions, in source order
    unbounded: tuple[int, ...] = ()  # the lines of its calls with no static bound


@dataclass(frozen=True)
class CallShortfall:
    """A capability the candidate can make fewer calls of than the failed script."""

    capability: str
    calls: int  # at most, in the candidate
    required: int  # at most, in the failed script
    expressions: tuple[CallExpression, ...]  # the failed script's, of this capability

    @property
    def lines(self) -> list[int]:
        """The failed script's lines these calls are on, once each, in order."""
        return sorted({c.line for c in self.expressions})

    def to_json(self) -> dict[str, Any]:
        return {"capability": self.capability, "calls": self.calls,
                "required_calls": self.required, "lines": [c.line for c in self.expressions]}


@dataclass(frozen=True)
class CommittedCall:
    identity: Identity  # as stored (the gate's storage site)
    capability: str
    revision: int  # that committed it
    payload: Any = None  # the normalized payload, when recorded
    recorded: bool = False
    take: int = 1
    winner: Any = None  # a race: the committed winner


@dataclass(frozen=True)
class FailedCall:
    identity: str
    capability: str
    outcome: str  # failed | diverged | denied
    payload: Any = None
    recorded: bool = False


@dataclass(frozen=True)
class RepairContext:
    """Everything the prompt is built from."""

    run_id: str
    failed: RevisionRecord  # the latest revision that ran (it passed the gate)
    original: RevisionRecord  # the revision that committed the first entry of the prefix
    frozen: dict[str, FrozenSite]
    frozen_lines: dict[str, SourceLine]  # frozen site -> its call
    failure: dict[str, Any]  # the failed revision's structured error
    failed_calls: tuple[FailedCall, ...] = ()
    required: tuple[CallExpression, ...] = ()  # the failed script's call expressions
    required_counts: tuple[CapabilityCalls, ...] = ()  # ... and its calls, per capability
    committed: tuple[CommittedCall, ...] = ()
    args: Any = None
    relocation: str = "remap"  # the gate's relocation setting (settings.relocation)
    fanouts: tuple[Fanout, ...] = ()  # of the failed script
    entry_lines: dict[str, int] | None = None  # storage site -> first call of its chain

    @property
    def required_calls(self) -> int:
        """The failed script's call expressions."""
        return len(self.required)

    @property
    def required_at_most(self) -> int | None:
        """How many capability calls the failed script can make (None: no static bound)."""
        return total_calls(self.required_counts)

    def entry_line(self, site: str) -> int | None:
        return (self.entry_lines or {}).get(site)


# ---- reading scripts ----------------------------------------------------------------------


def parsed_sites(text: str) -> list[Site] | None:
    try:
        return assign_sites(parse_python(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def bounded_sites(text: str) -> list[Site] | None:
    """The sites as admission sees them, each with its static bound (``max_calls``)."""
    try:
        tree = parse_python(text)
        unwrap_at(tree)  # the bounds are asked about the calls as the script wrote them
        return list(site_table(tree, Reach(tree)).sites)
    except (SyntaxError, ValueError, RecursionError, MemoryError, AnnotationError):
        return None


def source_line(text: str, first: int, last: int | None = None) -> str:
    lines = text.split("\n")
    if not 1 <= first <= len(lines):
        return ""
    return "\n".join(lines[first - 1:last or first]).strip()


def call_expressions(text: str, sites: Iterable[Site]) -> tuple[CallExpression, ...]:
    """Capability call *expressions* in the source (a helper's call counts once)."""
    seen: dict[tuple[str, str], CallExpression] = {}
    for site in sorted(sites, key=lambda s: (s.line, s.col)):
        key = (site.site.rsplit(">", 1)[-1], site.fingerprint)
        if site.capability != RACE and key not in seen:
            seen[key] = CallExpression(site.capability, site.fingerprint, site.line,
                                       source_line(text, site.line, site.end_line))
    return tuple(seen.values())


def capability_calls(text: str, sites: Iterable[Site]) -> tuple[CapabilityCalls, ...]:
    """How many calls of each capability the script can make (``bounded_sites``), in the
    order of their first call; a race decision is not a call (its branches' calls are)."""
    sites = [s for s in sorted(sites, key=lambda s: (s.line, s.col)) if s.capability != RACE]
    expressions = call_expressions(text, sites)
    out: dict[str, CapabilityCalls] = {}
    for site in sites:
        seen = out.get(site.capability)
        at_most = site.max_calls if seen is None else (
            None if seen.at_most is None or site.max_calls is None
            else seen.at_most + site.max_calls)
        unbounded = tuple(sorted({*(seen.unbounded if seen else ()),
                                  *((site.line,) if site.max_calls is None else ())}))
        out[site.capability] = CapabilityCalls(
            site.capability, at_most,
            tuple(c for c in expressions if c.capability == site.capability), unbounded)
    return tuple(out.values())


def total_calls(counts: Iterable[CapabilityCalls]) -> int | None:
    """All the calls of ``counts`` (None when one capability's have no static bound)."""
    total = 0
    for count in counts:
        if count.at_most is None:
            return None
        total += count.at_most
    return total


# ---- loading the run ----------------------------------------------------------------------


def _ran(revision: RevisionRecord) -> bool:
    """A revision that passed check and gate and reached a sandbox."""
    summary = revision.summary or {}
    return bool((summary.get("gate") or {}).get("accepted")) and summary.get("status") in (
        RevisionStatus.SUCCEEDED, RevisionStatus.FAILED, RevisionStatus.STOPPED)


def _choose_failed(run_id: str, revisions: list[RevisionRecord],
                   failed_revision: int | None) -> RevisionRecord:
    if not revisions:
        raise InputError(f"run {run_id!r} has no revisions; run it first with "
                         f"`revise run SCRIPT --run-id {run_id}`", run_id=run_id)
    if failed_revision is not None:
        pinned = [r for r in revisions if r.revision == failed_revision]
        if pinned:
            return pinned[0]
    running = [r.revision for r in revisions if r.status is RevisionStatus.RUNNING]
    if running:  # nothing has failed yet, and a candidate could not run: ask no model
        raise RunBusy(
            f"run {run_id!r} has revision {running[-1]} still running; there is no failure "
            f"to repair yet. Wait for it to end (`revise show {run_id}` shows it running "
            "until it does) and repair it then; a revision whose runner died is failed once "
            "its lease expires", run_id=run_id, revision=running[-1])
    ran = [r for r in revisions if _ran(r)]
    failed = ran[-1] if ran else revisions[-1]
    if failed.status is RevisionStatus.SUCCEEDED:
        raise InputError(f"run {run_id!r} succeeded at revision {failed.revision}; there is "
                         "nothing to repair", run_id=run_id)
    return failed


def load_context(store: RunStore, run_id: str, *, args: Any = MISSING,
                 relocation: str = "remap", failed_revision: int | None = None
                 ) -> RepairContext:
    """The context of run ``run_id``'s latest failure (or of ``failed_revision``).

    ``args`` defaults to the args stored with the run's latest revision.
    """
    revisions = store.list_revisions(run_id)
    failed = _choose_failed(run_id, revisions, failed_revision)
    if args is MISSING:
        args = resolve_inputs(store, run_id).args
    slots = store.list_slots(run_id)
    frozen = frozen_sites(slots)
    first = min((s.revision for s in slots), default=failed.revision)
    original = next((r for r in revisions if r.revision == first), failed)
    failed_sites = bounded_sites(failed.source_text) or []
    by_storage = _storage_sites(frozen, failed_sites, relocation)
    summary = failed.summary or {}
    return RepairContext(
        run_id=run_id, failed=failed, original=original, frozen=frozen,
        frozen_lines=_frozen_lines(frozen, slots, failed, by_storage, revisions),
        failure=dict(summary.get("error") or {}),
        failed_calls=_failed_calls(store, failed, summary),
        required=call_expressions(failed.source_text, failed_sites),
        required_counts=capability_calls(failed.source_text, failed_sites),
        committed=_committed(store, run_id, slots), args=args, relocation=relocation,
        fanouts=tuple(fanouts(failed.source_text, args)),
        entry_lines={name: site.entry_line for name, site in by_storage.items()})


def _storage_sites(frozen: dict[str, FrozenSite], sites: list[Site], relocation: str
                   ) -> dict[str, Site]:
    """The failed script's sites by the name their calls are stored under."""
    gate = check_gate(frozen, sites, relocation=relocation)
    return {gate.storage.get(s.site, s.site): s for s in sites}


def _frozen_lines(frozen: dict[str, FrozenSite], slots: list[SlotRecord],
                  failed: RevisionRecord, by_storage: dict[str, Site],
                  revisions: list[RevisionRecord]) -> dict[str, SourceLine]:
    lines: dict[str, SourceLine] = {}
    texts = {r.revision: r.source_text for r in revisions}
    for name, want in frozen.items():
        site = by_storage.get(name)
        # The failed script's call stands for the committed one only with the same
        # expression (a call committed by a later candidate may differ from it).
        if site is not None and site.capability == want.capability and (
                want.capability == RACE or site.fingerprint == want.fingerprint):
            lines[name] = SourceLine(site.line, source_line(failed.source_text, site.line,
                                                            site.end_line))
            continue
        slot = min((s for s in slots if s.identity.site == name), key=lambda s: s.revision)
        if slot.line and slot.revision in texts:
            text = source_line(texts[slot.revision], slot.line)
            if text:
                lines[name] = SourceLine(slot.line, text, f"revision {slot.revision}")
    return lines


def _committed(store: RunStore, run_id: str, slots: list[SlotRecord]
               ) -> tuple[CommittedCall, ...]:
    blobs = store.get_blobs(run_id, [s.digest for s in slots if s.capability != RACE])
    calls = []
    for slot in slots:
        if slot.capability == RACE:
            winner = slot.result.get("index") if isinstance(slot.result, dict) else None
            calls.append(CommittedCall(slot.identity, RACE, slot.revision, winner=winner))
            continue
        data = blobs.get(slot.digest)
        payload, take = unwrap_take(json.loads(data)) if data is not None else (None, 1)
        calls.append(CommittedCall(slot.identity, slot.capability, slot.revision, payload,
                                   data is not None, take))
    return tuple(calls)


def unwrap_take(value: Any) -> tuple[Any, int]:
    """A stored call value: the payload, or ``{"payload", "take"}`` for a further take."""
    if (isinstance(value, dict) and set(value) == {"payload", "take"}
            and isinstance(value["take"], int) and value["take"] > 1):
        return value["payload"], value["take"]
    return value, 1


def _failed_calls(store: RunStore, failed: RevisionRecord, summary: dict[str, Any]
                  ) -> tuple[FailedCall, ...]:
    identities = [i for i in summary.get("identities", [])
                  if i.get("outcome") in ("failed", "diverged", "denied")]
    if not identities:
        return ()
    attempts = {str(a.identity): a.digest for a in store.list_attempts(failed.run_id)
                if a.revision == failed.revision}
    error = summary.get("error") or {}
    digests = {}
    for ident in identities:
        key = f"{ident.get('site')}@{_path_text(ident.get('path'))}:{ident.get('occurrence')}"
        digest = attempts.get(key) or (error.get("digest") if error.get("identity") == key
                                       else None)
        digests[key] = (ident, digest)
    blobs = store.get_blobs(failed.run_id, [d for _, d in digests.values() if d])
    calls = []
    for key, (ident, digest) in digests.items():
        data = blobs.get(digest) if digest else None
        payload = unwrap_take(json.loads(data))[0] if data is not None else None
        calls.append(FailedCall(key, str(ident.get("capability")), str(ident.get("outcome")),
                                payload, data is not None))
    return tuple(calls)


def _path_text(path: Any) -> str:
    return ".".join(str(p) for p in path) if isinstance(path, list) else ""

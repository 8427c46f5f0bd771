"""Run a corpus shape on one run id and observe it: provider log, report, and a spy.

Used by the tests and by ``bench/repair_shapes.py``. Nothing here changes what
the core does: the spy wraps two methods to *observe* every result the host or
the broker hands to a call, and the provider log is read, never written.

Two properties are measured on every step:

* silent duplicate: a provider execution that paid or may have (outcome ok, a 5xx,
  a timeout, a request sent with no answer logged) of a (capability, payload digest)
  the run already paid, in an earlier step or earlier in this one, beyond the takes
  the step declared and the semantic repeats the ledger policy warned about by name;
* wrong reuse: a committed result handed to a call whose capability, call
  expression (fingerprint) or normalized payload digest differs from the slot's,
  or an image whose echoed prompt/size/model/style differ from the call's payload.

A slot handed to two calls of one revision is recorded too (``double_serves``):
the prefix promises that each slot serves at most one call per revision.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from broker.claim import Claimer
from broker.envelope import Envelope
from broker.providers import ProviderLog
from orchestrator.session import Session

from .corpus import Shape, Step

_IMAGE_ECHO = ("prompt", "size", "model", "style")


@dataclass
class Served:
    """One committed result handed to one call."""

    revision: int
    call: str  # the identity of the call that received it
    slot: str  # the identity of the slot it came from
    by: str  # "host" (prefix decision) or "broker" (slot found at claim time)
    problem: str | None = None


@dataclass
class Spy:
    served: list[Served] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, entry: Served) -> None:
        with self._lock:
            self.served.append(entry)

    def since(self, start: int) -> list[Served]:
        with self._lock:
            return self.served[start:]


def _mismatch(capability: str, fingerprint: str | None, digest: str, payload: Any,
              slot: Any) -> str | None:
    if slot.capability != capability:
        return f"capability {slot.capability} handed to a {capability} call"
    if fingerprint is not None and slot.fingerprint != fingerprint:
        return "a result committed for another call expression"
    if slot.digest != digest:
        return "a result committed for another payload"
    if capability == "image.generate" and isinstance(slot.result, dict) and isinstance(
            payload, dict):
        for key in _IMAGE_ECHO:
            if key in slot.result and slot.result.get(key) != payload.get(key):
                return f"an image whose {key} is {slot.result.get(key)!r}, the call asked " \
                       f"for {payload.get(key)!r}"
    return None


@contextlib.contextmanager
def spying() -> Iterator[Spy]:
    """Observe every replayed result, embedded (host decisions and broker claims)."""
    spy = Spy()
    apply = Session._apply
    decided = Claimer._decided

    def observed_apply(self: Session, seq: int, call: Any, request: Any, decision: Any):
        if decision.replays and decision.slot is not None:
            slot = decision.slot
            spy.add(Served(self.revision, str(call.identity), str(slot.identity), "host",
                           _mismatch(call.capability, call.fingerprint, call.digest,
                                     request.payload, slot)))
        return apply(self, seq, call, request, decision)

    def observed_decided(request: Any, begin: Any):
        slot = begin.slot
        if slot is not None:  # the claim transaction found it committed: a replay
            spy.add(Served(request.revision, str(request.identity), str(slot.identity),
                           "broker", _mismatch(request.capability, request.fingerprint,
                                               request.digest, request.payload, slot)))
        return decided(request, begin)

    with mock.patch.object(Session, "_apply", observed_apply), \
            mock.patch.object(Claimer, "_decided", staticmethod(observed_decided)):
        yield spy


@dataclass
class StepResult:
    step: Step
    report: dict[str, Any]
    entries: list[dict[str, Any]]  # provider executions this step added
    duplicates: int  # ok executions of a payload an earlier step already paid
    warned: int  # semantic-repeat warnings in the report
    served: list[Served] = field(default_factory=list)

    @property
    def paid(self) -> int:
        return len(self.entries)

    @property
    def silent_duplicates(self) -> int:
        return max(0, self.duplicates - self.warned - self.step.takes)

    @property
    def wrong_reuse(self) -> list[Served]:
        return [s for s in self.served if s.problem]

    @property
    def phantom_warnings(self) -> int:
        """Semantic-repeat warnings that say a repeat was paid when none was."""
        return max(0, self.warned - self.duplicates)

    @property
    def races_replayed(self) -> int:
        return sum(1 for i in self.report["identities"]
                   if i["capability"] == "ctx.race" and i["outcome"] == "replayed")

    @property
    def double_serves(self) -> list[str]:
        counts = Counter(s.slot for s in self.served)
        return sorted(slot for slot, n in counts.items() if n > 1)

    def outcome(self) -> str:
        error = (self.report.get("error") or {}).get("type")
        return self.report["status"] + (f" ({error})" if error else "")


def read_provider_log(path: Path) -> list[dict[str, Any]]:
    """One entry per dispatch (intent and outcome lines folded by ProviderLog.read)."""
    return ProviderLog(path).read()


def semantic_warnings(report: dict[str, Any]) -> int:
    return sum(1 for w in report.get("warnings", []) if w.startswith("semantic repeat"))


Submit = Callable[[str, str, Any, Envelope], dict[str, Any]]


def run_shape(shape: Shape, submit: Submit, provider_log: Callable[[], list[dict[str, Any]]],
              run_id: str, spy: Spy | None = None,
              steps: tuple[Step, ...] | None = None) -> list[StepResult]:
    """Every step of ``shape`` on ``run_id``; ``submit(run_id, script, args, envelope)``."""
    results: list[StepResult] = []
    paid_before: set[tuple[str, str]] = set()
    seen = len([e for e in provider_log() if e["run_id"] == run_id])
    for step in steps or shape.steps:
        mark = len(spy.served) if spy is not None else 0
        report = submit(run_id, step.script, shape.args_for(step),
                        Envelope(**step.envelope_fields()))
        entries = [e for e in provider_log() if e["run_id"] == run_id]
        new, seen = entries[seen:], len(entries)
        duplicates = 0
        for entry in new:  # one ledger per run: this step's earlier payments count too
            if may_have_charged(entry):
                duplicates += (entry["capability"], entry["digest"]) in paid_before
                paid_before.add((entry["capability"], entry["digest"]))
        results.append(StepResult(step, report, new, duplicates, semantic_warnings(report),
                                  spy.since(mark) if spy is not None else []))
    return results


def may_have_charged(entry: dict[str, Any]) -> bool:
    """A provider execution that paid, or may have (a 5xx, a timeout, no answer logged)."""
    if entry["outcome"] == "ok" or entry["outcome"] == "sent":
        return True
    status = entry.get("status")
    return (isinstance(status, int) and status >= 500) or entry.get("error_code") in (
        "timeout", "connection_lost", "bad_response", "provider_error")


def mismatches(result: StepResult) -> list[str]:
    """How a step's observation differs from its expectation (empty: as expected)."""
    step, report = result.step, result.report
    found: list[str] = []

    def differ(what: str, want: Any, got: Any) -> None:
        if want != got:
            found.append(f"{what}: expected {want!r}, got {got!r}")

    differ("paid", step.paid, result.paid)
    differ("status", step.status, report["status"])
    differ("error", step.error, (report.get("error") or {}).get("type"))
    for key, want in step.calls.items():
        differ(f"calls.{key}", want, report["calls"][key])
    differ("gate", step.gate, tuple(c["kind"] for c in report["gate"]["counterexamples"]))
    if step.relocations is not None:
        differ("relocations", step.relocations, len(report["gate"]["relocations"]))
    if step.orphans is not None:
        differ("orphans", step.orphans, len(report["orphans"]))
    if step.races_replayed is not None:
        differ("races replayed", step.races_replayed, result.races_replayed)
    differ("warned", step.warned, result.warned)
    found.extend(invariant_violations(result))
    return found


def invariant_violations(result: StepResult) -> list[str]:
    """The properties every step of every shape must have, whatever it expects."""
    found = []
    if result.silent_duplicates:
        found.append(f"{result.silent_duplicates} silent duplicate paid call(s)")
    found += [f"wrong reuse: {s.call} <- {s.slot} ({s.by}): {s.problem}"
              for s in result.wrong_reuse]
    found += [f"slot {slot} served {n} calls of one revision" for slot, n in
              Counter(s.slot for s in result.served).items() if n > 1]
    if result.phantom_warnings:
        found.append(f"{result.phantom_warnings} semantic-repeat warning(s) for a repeat "
                     "that was not paid")
    return found

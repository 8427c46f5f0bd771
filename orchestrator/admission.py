"""Admission: check → sites → gate (with relocation) → annotate, before any sandbox.

Pure: it reads the committed slots it is given and nothing else. The result is
what a sandbox job carries (``to_wire``): the annotated text, the site table and
the gate's storage names. The sandbox side only runs the gate again, against
the prefix as it is when the job starts (``regate``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any

from broker.records import SlotRecord
from broker.syntax import parse_python
from orchestrator.annotate import Annotated, annotate
from orchestrator.checker import CheckReport, check
from orchestrator.gate import GateResult, check_gate, frozen_sites
from orchestrator.sites import Site
from orchestrator.source import Source


@dataclass(frozen=True)
class Admission:
    """A candidate that passed the checker and the gate, ready for a sandbox."""

    text: str  # the annotated script the sandbox runs
    sites: tuple[Site, ...]
    gate: GateResult

    @property
    def whitelist(self) -> dict[str, Site]:
        return {s.site: s for s in self.sites}

    def storage_site(self, site: str) -> str:
        return self.gate.storage.get(site, site)

    def regate(self, slots: list[SlotRecord], relocation: str) -> Admission:
        """The gate again, against the prefix as it is now (a concurrent revision of the
        run may have committed since admission)."""
        gate = check_gate(frozen_sites(slots), self.sites, relocation=relocation)
        return Admission(self.text, self.sites, gate)

    def to_wire(self) -> dict[str, Any]:
        return {"text": self.text, "sites": [asdict(s) for s in self.sites]}

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> Admission:
        """The dispatcher's admission as a sandbox job carries it; the gate runs again
        against the prefix the revision starts on (``regate``)."""
        sites = tuple(Site.from_json(s) for s in data["sites"])
        return cls(data["text"], sites, GateResult(accepted=False))


@dataclass(frozen=True)
class Refusal:
    """Why a candidate starts nothing: checker violations or gate counterexamples."""

    check: CheckReport
    gate: GateResult | None


def admit(source: Source, slots: list[SlotRecord], *, relocation: str = "remap"
          ) -> Admission | Refusal:
    checked, annotated = _checked(source.text)
    if annotated is None:
        return Refusal(checked, None)
    gate = check_gate(frozen_sites(slots), annotated.sites,
                      relocation=relocation)
    if not gate.accepted:
        return Refusal(checked, gate)
    return Admission(annotated.text, annotated.sites, gate)


@lru_cache(maxsize=64)
def _checked(text: str) -> tuple[CheckReport, Annotated | None]:
    """The checker's verdict and, for a valid script, its annotation: both depend on the
    text alone (and are immutable), so a script submitted again with other args, the
    usual shape of a platform's jobs, is parsed and walked once per process."""
    checked = check(text)
    if not checked.valid:
        return checked, None
    return checked, annotate(text, parse_python(text))

"""The run report: the JSON contract of ``revise run --json`` and ``revise submit --json``.

One typed model, filled in one place per fact, dumped once at the edge. Field
names and shapes are the public contract (ARCHITECTURE.md section 5); fields
beyond it (``violations``, ``warnings``, ``sandbox``, ``relocations``, ...) are
additions, never renames.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from broker.records import RevisionStatus

__all__ = ["CallCounts", "CertificateReport", "Counterexample", "ErrorReport", "GateReport",
           "IdentityReport", "OrphanReport", "RevisionStatus", "RunReport"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ErrorReport(_Model):
    """A Revise error's ``to_json`` (its typed fields travel along), or the error a script
    failed with (its exception's type; ``code`` is a provider's code for a CapabilityError,
    else ``script_error``)."""

    model_config = ConfigDict(extra="allow")

    type: str
    code: str | None = None
    message: str
    identity: str | None = None

    @field_validator("code", mode="before")
    @classmethod
    def _code_text(cls, value: Any) -> Any:
        # A script's error may carry a number as its code (the host admits str and int).
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class CallCounts(_Model):
    executed: int = 0  # provider dispatch attempts, rejected ones included
    succeeded: int = 0
    failed: int = 0
    uncertain: int = 0  # maybe charged, its outcome unknown: an operator decides
    replayed: int = 0  # committed results served without a provider call
    denied: int = 0


class IdentityReport(_Model):
    site: str
    path: list[int]
    occurrence: int
    capability: str
    outcome: str  # executed | replayed | failed | diverged | denied | stopped
    replayed_from: str | None = None  # the committed identity a relocated call replayed
    cost: float = 0.0


class Counterexample(_Model):
    model_config = ConfigDict(extra="allow")

    kind: str
    site: str


class GateReport(_Model):
    model_config = ConfigDict(extra="allow")

    accepted: bool = False
    counterexamples: list[Counterexample] = Field(default_factory=list)
    relocations: list[dict[str, Any]] = Field(default_factory=list)


class CertificateReport(_Model):
    model_config = ConfigDict(extra="allow")

    digest: str
    entries: int
    differences: list[dict[str, Any]] = Field(default_factory=list)
    # Committed sites that a relocated site of this revision now stands for.
    relocations: list[dict[str, Any]] = Field(default_factory=list)


class OrphanReport(_Model):
    site: str
    path: list[int]
    occurrence: int
    identity: str


class RunReport(_Model):
    run_id: str
    revision: int | None = None
    status: RevisionStatus = RevisionStatus.STOPPED
    result: Any = None
    error: ErrorReport | None = None
    calls: CallCounts = Field(default_factory=CallCounts)
    identities: list[IdentityReport] = Field(default_factory=list)
    orphans: list[OrphanReport] = Field(default_factory=list)
    gate: GateReport = Field(default_factory=GateReport)
    certificate: CertificateReport | None = None
    violations: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    sandbox: str | None = None
    logs: list[str] = Field(default_factory=list)
    # Unit prices of this revision's attempts the provider may have charged for (a
    # refusal its terms make free costs nothing: broker.charging.may_be_charged).
    spend: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    @property
    def succeeded(self) -> bool:
        return self.status is RevisionStatus.SUCCEEDED

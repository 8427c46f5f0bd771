"""The run envelope: what a run may do, as frozen data.

Grants, approvals, budget, concurrency and sandbox limits are policy; the
broker and the sandbox runner enforce them. ``load_envelope`` reads JSON or
YAML and turns every mistake into an ``InputError`` that names the file, the
field and the fix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from broker.catalog import CAPABILITY_NAMES, PRODUCTION_CAPABILITIES
from broker.errors import InputError
from broker.settings import LedgerPolicy, OrphanPolicy


class _Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Budget(_Policy):
    """Limits on provider dispatch attempts and their summed unit price; None is unlimited."""

    max_calls: int | None = Field(default=None, ge=0)
    max_cost: float | None = Field(default=None, ge=0, allow_inf_nan=False)


# The largest result the host accepts from a sandbox: sandbox.language.LIMITS
# ["result_bytes"] (the broker sits below the sandbox package; a test holds them equal).
OUTPUT_BYTES_MAX = 4 << 20


class SandboxLimits(_Policy):
    """Per-run sandbox limits. The maxima are what every host can start (the kernel's
    pids and cgroup limits, a day of wall time) or take back (a result the host reads
    whole); CPUs and memory are also held to the host's own (``HostMaxima``) when the
    envelope is loaded: a larger value is refused at submit with the field named, never
    accepted and then failed at sandbox start."""

    memory_mb: int = Field(default=512, ge=16, le=65_536)
    cpus: float = Field(default=1.0, gt=0, le=64)
    pids: int = Field(default=128, ge=8, le=4096)
    tmpfs_mb: int = Field(default=64, ge=1, le=16_384)
    timeout_seconds: float = Field(default=300.0, gt=0, le=86_400, allow_inf_nan=False)
    output_bytes: int = Field(default=1_048_576, ge=1024, le=OUTPUT_BYTES_MAX)
    args_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)


def _check_names(names: list[str], field: str) -> list[str]:
    unknown = [name for name in names if name not in CAPABILITY_NAMES]
    if unknown:
        raise ValueError(
            f"unknown capability {', '.join(map(repr, unknown))} in {field}; "
            f"the catalog has: {', '.join(sorted(CAPABILITY_NAMES))}")
    return list(dict.fromkeys(names))  # drop duplicates, keep the author's order


class Envelope(_Policy):
    grants: list[str] = Field(default_factory=lambda: sorted(PRODUCTION_CAPABILITIES))
    approvals_required: list[str] = Field(default_factory=list)
    approvals: list[str] = Field(default_factory=list)
    # A repair may pay a further take (``take=N``) of a payload the run already paid for
    # only for the capabilities a human listed here: a second picture is a decision,
    # never a way around the paid-payload ledger.
    approved_takes: list[str] = Field(default_factory=list)
    budget: Budget = Field(default_factory=Budget)
    concurrency: int = Field(default=4, ge=1, le=64)
    # One provider request at most this long; None: the deployment's own limit
    # (REVISE_PROVIDER_TIMEOUT_SECONDS). A request cut off may still be paid.
    call_timeout_seconds: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    ledger_policy: LedgerPolicy | None = None
    orphan_policy: OrphanPolicy | None = None
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)
    dry_run: bool = False

    @field_validator("grants", "approvals_required", "approvals", "approved_takes")
    @classmethod
    def _known_capabilities(cls, names: list[str], info: Any) -> list[str]:
        return _check_names(names, info.field_name)

    def is_granted(self, capability: str) -> bool:
        return capability in self.grants

    def needs_approval(self, capability: str) -> bool:
        """True when the capability requires an approval the envelope does not carry."""
        return capability in self.approvals_required and capability not in self.approvals


@dataclass(frozen=True)
class HostMaxima:
    """What one sandbox on this host can be given: the host's CPUs and memory."""

    cpus: int
    memory_mb: int

    @classmethod
    def of_this_host(cls) -> HostMaxima:
        pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        return cls(cpus=os.cpu_count() or 1, memory_mb=pages >> 20)

    def problems(self, limits: SandboxLimits) -> list[tuple[str, str]]:
        """(field, what to do) for every limit past this host's."""
        found = []
        if limits.cpus > self.cpus:
            found.append(("sandbox.cpus", f"{limits.cpus:g} CPUs is more than this host has "
                          f"({self.cpus}); ask for at most {self.cpus}"))
        if limits.memory_mb > self.memory_mb:
            found.append(("sandbox.memory_mb", f"{limits.memory_mb} MiB is more memory than "
                          f"this host has ({self.memory_mb} MiB); ask for less"))
        return found


# ---- loading -------------------------------------------------------------------------------

_FIX_BY_TYPE = {
    "extra_forbidden": "remove it; allowed fields here are: {allowed}",
    "missing": "add it",
}


# An envelope is grants, limits and approvals: a few hundred bytes. The file's size is
# checked before it is parsed (a YAML parser takes about half a second per MiB).
MAX_ENVELOPE_BYTES = 256 * 1024


def load_envelope(path: Path, maxima: HostMaxima | None = None) -> Envelope:
    """Read an envelope from JSON or YAML (chosen by extension, else JSON then YAML), its
    sandbox limits within ``maxima`` (this host's by default)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_ENVELOPE_BYTES + 1)
        if len(raw) > MAX_ENVELOPE_BYTES:
            raise InputError(f"envelope file {path} is over the limit of {MAX_ENVELOPE_BYTES} "
                             "bytes (not a setting: an envelope holds grants, limits and "
                             "approvals, a few hundred bytes); pass the envelope, not the "
                             "args or the data, to --envelope", file=str(path),
                             limit=MAX_ENVELOPE_BYTES)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"envelope file {path} does not exist; pass an existing JSON or "
                         "YAML file to --envelope", file=str(path)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read envelope file {path}: {exc}; pass a readable UTF-8 "
                         "JSON or YAML file", file=str(path)) from None
    data = _parse(path, text)
    if data is None:
        raise InputError(f"envelope file {path} is empty; write {{}} for the default envelope",
                         file=str(path))
    if not isinstance(data, dict):
        raise InputError(f"envelope file {path} must hold an object (mapping) at the top level, "
                         f"got {type(data).__name__}; write e.g. {{\"grants\": "
                         "[\"image.generate\"]}", file=str(path))
    try:
        envelope = Envelope.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(path, exc) from None
    problems = (maxima or HostMaxima.of_this_host()).problems(envelope.sandbox)
    if problems:
        field, fix = problems[0]
        raise InputError(f"envelope file {path}: field {field!r}: {fix}", file=str(path),
                         field=field)
    return envelope


def _parse(path: Path, text: str) -> Any:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _parse_json(path, text)
    if suffix in (".yaml", ".yml"):
        return _parse_yaml(path, text)
    try:
        return json.loads(text) if text.strip() else None
    except RecursionError:
        raise _too_deep(path) from None
    except ValueError:
        return _parse_yaml(path, text)


def _parse_json(path: Path, text: str) -> Any:
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise _too_deep(path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"envelope file {path} is not valid JSON: {exc.msg} at line "
                         f"{exc.lineno} column {exc.colno}; fix the syntax there",
                         file=str(path), line=exc.lineno) from None


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise _too_deep(path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "syntax error"
        raise InputError(f"envelope file {path} is not valid YAML: {problem}{where}; fix the "
                         "syntax there", file=str(path)) from None


def _too_deep(path: Path) -> InputError:
    return InputError(f"envelope file {path} nests too deeply to read; an envelope is a "
                      "flat object like {\"grants\": [\"image.generate\"], \"sandbox\": "
                      "{\"timeout_seconds\": 60}}", file=str(path))


def _validation_error(path: Path, exc: ValidationError) -> InputError:
    problems = []
    for error in exc.errors()[:5]:
        loc = error["loc"]
        field = ".".join(str(part) for part in loc) or "(top level)"
        message = error["msg"].removeprefix("Value error, ")
        fix = _FIX_BY_TYPE.get(error["type"], "")
        if fix:
            fix = "; " + fix.format(allowed=", ".join(_model_at(loc[:-1]).model_fields))
        elif "catalog" not in message:
            fix = f"; got {error.get('input')!r}"
        problems.append(f"field {field!r}: {message}{fix}")
    more = len(exc.errors()) - len(problems)
    tail = f" (and {more} more)" if more > 0 else ""
    first = ".".join(str(part) for part in exc.errors()[0]["loc"])
    return InputError(f"envelope file {path}: " + "; ".join(problems) + tail,
                      file=str(path), field=first)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model that owns the field at ``loc`` (for listing its allowed fields)."""
    model: type[BaseModel] = Envelope
    for part in loc:
        annotation = model.model_fields.get(str(part))
        target = annotation.annotation if annotation else None
        if isinstance(target, type) and issubclass(target, BaseModel):
            model = target
        else:
            break
    return model

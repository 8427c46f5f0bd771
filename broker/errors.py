"""One error hierarchy for the whole host side.

Every error has a stable ``code`` (stored in run records and printed in JSON),
a human message that names the problem and the fix, and typed fields such as
the identity it concerns. Errors survive pickling because Celery moves them
between processes.

Scripts never run in the host process, so host errors are ordinary
``Exception`` subclasses. The errors a *script* can see are defined again,
by name, inside the sandbox runtime: ``CapabilityError`` there is catchable,
and the host's safety stops arrive as a ``BaseException`` the script cannot
swallow. ``SafetyStop`` marks the host errors that end a run that way.
"""

from __future__ import annotations

from typing import Any


class ReviseError(Exception):
    """Root of every error Revise raises on purpose."""

    code = "revise_error"

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.fields))

    @property
    def identity(self) -> str | None:
        value = self.fields.get("identity")
        return None if value is None else str(value)

    def to_json(self) -> dict[str, Any]:
        """Type, code, message and every typed field: what crosses a queue or a report."""
        return {**_json_fields(self.fields), "type": type(self).__name__, "code": self.code,
                "message": self.message, "identity": self.identity}


def _json_fields(fields: dict[str, Any]) -> dict[str, Any]:
    plain = (str, int, float, bool, type(None))
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if isinstance(value, plain):
            out[key] = value
        elif isinstance(value, list | tuple) and all(isinstance(v, plain) for v in value):
            out[key] = list(value)
        else:
            out[key] = str(value)
    return out


def _rebuild(cls: type[ReviseError], message: str, fields: dict[str, Any]) -> ReviseError:
    return cls(message, **fields)


class ConfigError(ReviseError):
    code = "config_error"


class InputError(ReviseError):
    """A user-supplied file or value is malformed (script bytes, args, envelope)."""

    code = "input_error"


# ---- checker and gate (pre-spend) ----------------------------------------------------------


class CheckerError(ReviseError):
    code = "checker_error"


class CheckFailed(CheckerError):
    code = "check_failed"


class AnnotationError(CheckerError):
    code = "annotation_error"


class GateError(ReviseError):
    code = "gate_error"


class GateRejected(GateError):
    code = "gate_rejected"


class PrefixConflict(GateError):
    code = "prefix_conflict"


# ---- safety stops (end the run; a script can never catch them) ------------------------------


class SafetyStop(ReviseError):
    code = "safety_stop"


class ReplayDivergence(SafetyStop):
    code = "replay_divergence"


class AttemptUnresolved(SafetyStop):
    code = "attempt_unresolved"


class AttemptInFlight(SafetyStop):
    code = "attempt_in_flight"


class RevisionNotRunning(SafetyStop):
    """A call of a revision that is no longer running (finished, or failed as lost): a late
    or redelivered copy. Nothing is spent; the delivery is acknowledged as stale."""

    code = "revision_not_running"


class SemanticRepeatDenied(SafetyStop):
    code = "semantic_repeat_denied"


class TakeNotApproved(SafetyStop):
    """A repair asked for a further take of a payload the run already paid for, and the
    envelope does not approve further takes of that capability."""

    code = "take_not_approved"


class CapabilityDenied(SafetyStop):
    code = "capability_denied"


class BudgetExceeded(SafetyStop):
    code = "budget_exceeded"


class OrphanStop(SafetyStop):
    code = "orphans_stop"


class SandboxProtocolError(SafetyStop):
    """The sandbox broke the RPC protocol (or wrote anything the host did not expect)."""

    code = "sandbox_protocol_error"


class StoreUnavailable(SafetyStop):
    code = "store_unavailable"


class LedgerUnavailable(SafetyStop):
    code = "ledger_unavailable"


class QueueUnavailable(SafetyStop):
    """Redis as Celery broker or result backend does not answer (``broker.outage``)."""

    code = "queue_unavailable"


class Parked(SafetyStop):
    """Not a failure: the revision's calls are all in flight at broker workers, so its
    sandbox job stops its sandbox, gives its slot back, and resumes when they are settled
    (the revision keeps running)."""

    code = "parked"


# ---- broker and providers ------------------------------------------------------------------


class BrokerError(ReviseError):
    code = "broker_error"


class CapabilityError(BrokerError):
    """A provider rejected or failed a call. Scripts may catch it by name."""

    code = "capability_error"


class StoreError(ReviseError):
    code = "store_error"


class SlotConflict(StoreError):
    """A different record is already committed at this identity."""

    code = "slot_conflict"


class RunNotFound(StoreError):
    code = "run_not_found"


class SchemaNotReady(StoreError):
    """A read-only command found the run store without the schema this code reads (none
    yet, or an older one); it never migrates."""

    code = "schema_not_ready"


class RunBusy(StoreError):
    """A revision of the run is still running: one revision per run at a time, so two
    revisions never pay for the same payload together."""

    code = "run_busy"


# ---- sandbox -------------------------------------------------------------------------------


class SandboxError(ReviseError):
    code = "sandbox_error"


class SandboxTimeout(SandboxError):
    code = "sandbox_timeout"


class SandboxUnavailable(SandboxError):
    code = "sandbox_unavailable"


class RevisionLost(SandboxError):
    """The revision's owner (sandbox worker, dispatcher, embedded run) died or its job
    message was lost; the reconciler failed it and the run can be submitted again."""

    code = "revision_lost"


class ScriptError(SandboxError):
    """The script raised (or returned something that is not JSON)."""

    code = "script_error"


def error_class(name: str) -> type[ReviseError]:
    """The ReviseError subclass called ``name`` (for errors that crossed a process)."""
    stack: list[type[ReviseError]] = [ReviseError]
    while stack:
        cls = stack.pop()
        if cls.__name__ == name:
            return cls
        stack.extend(cls.__subclasses__())
    return ReviseError


def error_from_json(data: dict[str, Any]) -> ReviseError:
    fields = {k: v for k, v in data.items() if k not in {"type", "code", "message"}}
    return error_class(str(data.get("type")))(str(data.get("message", "")), **fields)

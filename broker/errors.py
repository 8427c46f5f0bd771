"""One error hierarchy for the whole host side.

Every error has a stable ``code`` (stored in run records and printed in JSON),
a human message that names the problem and the fix, and typed fields declared
in its class body like a dataclass's (``identity: IdentityText | None = None``)
and checked when the error is made: an unknown or mistyped field is a
programming error (TypeError). One root, ``ReviseError``, and a base per
subsystem: input and configuration, admission (checker, gate, repair guard),
safety stops, broker, store, sandbox, queue.

An error survives every way it travels whole, with its class, code and fields:
pickling (Celery's prefork pool), Celery's JSON result backend (it rebuilds an
exception as ``cls(*args)``, so ``args`` holds the message and every field in
declaration order), a queue answer or run report (``to_json`` and
``error_from_json``).

Scripts never run in the host process, so host errors are ordinary
``Exception`` subclasses. The errors a *script* can see are defined again,
by name, inside the sandbox runtime: ``CapabilityError`` there is catchable,
and the host's safety stops arrive as a ``BaseException`` the script cannot
swallow. ``SafetyStop`` marks the host errors that end a run that way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, dataclass_transform

from broker import error_fields
from broker.error_fields import MISSING, Positional

if TYPE_CHECKING:
    from pydantic import JsonValue

# A call identity's text (``site@path:occurrence``). An ``Identity`` given for such a field
# is stored as its text.
IdentityText = str


def positional(*, default: Any = MISSING, kw_only: bool = False) -> Any:
    """A field its class takes by position after the message, for the classes whose callers
    build them so (``workers.outcome``). Type checkers read ``kw_only`` only where it is
    written: write ``kw_only=False``."""
    return Positional(default)


@dataclass_transform(kw_only_default=True, field_specifiers=(positional,))
class _Declared:
    """Type checkers read each subclass's annotated fields as its keyword-only
    constructor arguments after the message, so raise sites are checked before they run."""


class ReviseError(_Declared, Exception):
    """Root of every error Revise raises on purpose."""

    code: ClassVar[str] = "revise_error"
    _registry: ClassVar[dict[str, type[ReviseError]]] = {}
    message: str = positional(kw_only=False)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "code" not in cls.__dict__:
            raise TypeError(f"{cls.__name__} declares no code of its own")
        owners = {c.code: c.__name__ for c in ReviseError._registry.values()}
        if cls.code in owners or cls.__name__ in ReviseError._registry:
            raise TypeError(f"{cls.__name__} (code {cls.code!r}): its name or code is taken")
        ReviseError._registry[cls.__name__] = cls

    def __init__(self, message: str, *values: Any, **fields: Any) -> None:
        if not isinstance(message, str):
            raise TypeError(f"{type(self).__name__} takes a message (str) first, got "
                            f"{type(message).__name__}")
        checked = error_fields.check(type(self), values, fields)
        super().__init__(message, *checked.values())
        self.message = message
        for name, value in checked.items():
            setattr(self, name, value)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, self.fields))

    @property
    def fields(self) -> dict[str, Any]:
        """Every declared field and its value (its default when it was not given)."""
        return {f.name: getattr(self, f.name) for f in error_fields.fields_of(type(self))}

    def to_json(self) -> dict[str, Any]:
        """Type, code, message, identity and every typed field: what crosses a queue or is
        stored in a report."""
        return {"type": type(self).__name__, "code": self.code, "message": self.message,
                "identity": getattr(self, "identity", None), **self.fields}


ReviseError._registry[ReviseError.__name__] = ReviseError


def _rebuild(cls: type[ReviseError], message: str, fields: dict[str, Any]) -> ReviseError:
    return cls(message, **fields)


# ---- input and configuration ---------------------------------------------------------------


class ConfigError(ReviseError):
    """A setting, a credential or a configured endpoint is wrong."""

    code = "config_error"
    setting: str | None = None  # the REVISE_* variable to fix
    capability: str | None = None
    status: int | None = None  # the HTTP status an endpoint answered with


class InputError(ReviseError):
    """A user-supplied file or value is malformed (script bytes, args, envelope, a name)."""

    code = "input_error"
    file: str | None = None
    line: int | None = None
    field: str | None = None  # what the bad value is for: an envelope key, "run id", ...
    value: str | None = None  # the bad value, shortened for display
    limit: int | None = None  # the limit it is over
    run_id: str | None = None
    capability: str | None = None
    artifact: str | None = None


# ---- admission: checker, gate, repair guard (pre-spend) ------------------------------------


class AdmissionError(ReviseError):
    """A script or candidate is refused before anything runs or is spent."""

    code = "admission_error"


class CheckFailed(AdmissionError):
    """The checker refused the script."""

    code = "check_failed"
    rules: list[str]  # each violation's rule id (R00-R12), in the report's order
    lines: list[int]  # each violation's line, in the same order


class AnnotationError(AdmissionError):
    code = "annotation_error"
    site: str | None = None
    line: int | None = None


class GateRejected(AdmissionError):
    """The gate refused the candidate: a committed call would change or go."""

    code = "gate_rejected"
    # each as the gate reports it: kind (removed | capability_changed | call_changed |
    # ambiguous), site, and what it knows of the lines and candidates
    counterexamples: list[dict[str, JsonValue]]


class CallsDropped(AdmissionError):
    """The repair loop's call-count guard: a candidate that can make fewer capability
    calls than the failed script (it would drop work the run has to do). Calls are counted
    by their static bounds (a loop over a literal list of 3 is 3 calls); when a bound is
    unknown, call expressions are (``counted``)."""

    code = "calls_dropped"
    calls: int  # the candidate's calls (at most), or its call expressions
    required_calls: int  # ... the failed script's
    # counting calls: the failed script's call lines of the capabilities the candidate has
    # fewer calls of; counting expressions: the lines of the expressions it lacks
    dropped_lines: list[int]
    counted: str = "call expressions"  # calls | call expressions (records before: the latter)
    # counting calls, per capability the candidate has fewer calls of: capability, calls,
    # required_calls, lines (of the failed script)
    short: list[dict[str, JsonValue]] | None = None


class NoScript(AdmissionError):
    """A model's answer holds no script to judge."""

    code = "no_script"


class AnswerCutOff(NoScript):
    """A model's answer stopped at its output limit (finish_reason ``length``): a script
    taken from it would be cut off too, and may even parse without its end."""

    code = "answer_cut_off"


class PrefixConflict(AdmissionError):
    code = "prefix_conflict"
    site: str


# ---- safety stops (end the run; a script can never catch them) ------------------------------


class SafetyStop(ReviseError):
    code = "safety_stop"
    identity: IdentityText | None = None  # the call that was stopped, when one was


class ReplayDivergence(SafetyStop):
    code = "replay_divergence"
    committed_digest: str | None = None
    digest: str | None = None  # of the payload the revision sent
    line: int | None = None  # of the committed call


class AttemptUnresolved(SafetyStop):
    code = "attempt_unresolved"
    attempt_id: int | None = None


class AttemptInFlight(SafetyStop):
    code = "attempt_in_flight"
    attempt_id: int | None = None


class RevisionNotRunning(SafetyStop):
    """A call of a revision that is no longer running (finished, or failed as lost): a late
    or redelivered copy. Nothing is spent; the delivery is acknowledged as stale."""

    code = "revision_not_running"
    run_id: str | None = None
    status: str | None = None  # the revision's


class SemanticRepeatDenied(SafetyStop):
    code = "semantic_repeat_denied"
    committed_identity: IdentityText | None = None  # where the payload was paid before
    committed_line: int | None = None


class TakeNotApproved(SafetyStop):
    """A repair asked for a further take of a payload the run already paid for, and the
    envelope does not approve further takes of that capability."""

    code = "take_not_approved"
    committed_identity: IdentityText | None = None
    capability: str | None = None


class CapabilityDenied(SafetyStop):
    code = "capability_denied"
    capability: str
    field: str | None = None  # the payload field refused


class BudgetExceeded(SafetyStop):
    code = "budget_exceeded"


class OrphanStop(SafetyStop):
    code = "orphans_stop"


class SandboxProtocolError(SafetyStop):
    """The sandbox broke the RPC protocol (or wrote anything the host did not expect)."""

    code = "sandbox_protocol_error"
    site: str | None = None


class StoreUnavailable(SafetyStop):
    code = "store_unavailable"
    url: str | None = None  # password masked
    service: str | None = None
    host: str | None = None
    port: int | None = None
    action: str | None = None  # what was being done
    spool: str | None = None  # where a paid result waits to be committed


class QueueUnavailable(SafetyStop):
    """Redis as Celery broker or result backend does not answer (``broker.outage``)."""

    code = "queue_unavailable"
    service: str | None = None
    host: str | None = None
    port: int | None = None


class Parked(SafetyStop):
    """Not a failure: the revision's calls are all in flight at broker workers, so its
    sandbox job stops its sandbox, gives its slot back, and resumes when they are settled
    (the revision keeps running)."""

    code = "parked"


# ---- broker and providers ------------------------------------------------------------------


class BrokerError(ReviseError):
    code = "broker_error"
    identity: IdentityText | None = None
    job_id: str | None = None


class CapabilityError(BrokerError):
    """A provider rejected or failed a call. Scripts may catch it by name."""

    code = "capability_error"
    capability: str
    status: int | None  # HTTP status; None when no answer came
    provider_code: str  # the provider's own code (invalid_parameter, rate_limited, ...)
    retryable: bool = False
    field: str | None = None  # the payload field the provider refused
    param: str | None = None  # ... as the provider named it
    retry_after: str | None = None  # the Retry-After header as sent


# ---- run store -----------------------------------------------------------------------------


class StoreError(ReviseError):
    code = "store_error"
    run_id: str | None = None
    identity: IdentityText | None = None
    attempt_id: int | None = None
    status: str | None = None  # the attempt's
    action: str | None = None


class SlotConflict(StoreError):
    """A different record is already committed at this identity."""

    code = "slot_conflict"


class RunNotFound(StoreError):
    code = "run_not_found"


class SchemaNotReady(StoreError):
    """A read-only command found the run store without the schema this code reads (none
    yet, or an older one); it never migrates."""

    code = "schema_not_ready"
    url: str  # password masked
    schema: str | None = None  # the store's; None: no Revise schema at all
    head: str | None = None  # the one this code reads


class RunBusy(StoreError):
    """A revision of the run is still running: one revision per run at a time, so two
    revisions never pay for the same payload together."""

    code = "run_busy"
    revision: int | None = None  # the one still running


# ---- sandbox -------------------------------------------------------------------------------


class SandboxError(ReviseError):
    code = "sandbox_error"
    identity: IdentityText | None = None


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


# ---- the job queue (Celery deployment) -----------------------------------------------------


class QueueError(ReviseError):
    code = "queue_error"
    job_id: str | None = None


class DispatchFailed(QueueError):
    """The dispatcher could not answer a job: it died at every delivery, or its task failed
    with an error that is not an answer."""

    code = "dispatch_failed"
    deliveries: int | None = None  # how many times it was started and died


class JobInFlight(QueueError):
    """A copy of a job is still being dispatched by another worker; this one waited for its
    answer and gave up."""

    code = "job_in_flight"
    holder: str | None = None  # the worker dispatching it


def error_class(name: str) -> type[ReviseError] | None:
    """The ReviseError subclass called ``name`` (for errors that crossed a process); None
    when no imported module defines one."""
    return ReviseError._registry.get(name)


def error_from_json(data: dict[str, Any]) -> ReviseError:
    """The error ``to_json`` described, rebuilt as its class with its typed fields. A
    ValueError when ``data`` is not such a description (it came from a queue: hostile)."""
    if not isinstance(data, dict):
        raise ValueError(f"an error is described by a JSON object, not {type(data).__name__}")
    name = data.get("type")
    cls = error_class(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"an error of unknown type {str(name)[:100]!r}")
    if data.get("code", cls.code) != cls.code:
        raise ValueError(f"a {cls.__name__} with code {str(data.get('code'))[:100]!r}; its "
                         f"code is {cls.code!r}")
    declared = {f.name for f in error_fields.fields_of(cls)}
    fields = {k: v for k, v in data.items() if k not in {"type", "code", "message"}
              and not (k == "identity" and v is None and k not in declared)}
    message = data.get("message")
    try:
        return cls(message if isinstance(message, str) else str(message), **fields)
    except TypeError as exc:
        raise ValueError(str(exc)) from None

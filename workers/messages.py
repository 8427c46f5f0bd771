"""The messages each Celery task receives, as pydantic models checked on arrival.

Anyone who can reach Redis can put a message on a queue, so a task validates
its message before it takes a lease, opens a store or starts anything. A bad
message is answered (not raised) with an ``InvalidMessage`` error that carries
pydantic's description of what is wrong, in the answer shape the task always
uses, and the worker goes on serving the next message.

What is checked beyond the types: names that become paths or keys
(``broker.names``), text that must encode to UTF-8 (JSON can carry a lone
surrogate, which would otherwise fail deep inside the pipeline), JSON values,
and the envelope (``broker.envelope.Envelope``, which forbids unknown fields).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)

from broker.envelope import Envelope
from broker.errors import InputError
from broker.identity import lone_surrogate_at, utf8_bytes
from broker.names import name_checker, validate_name


class InvalidMessage(InputError):
    """A queue message (or the client's job before sending) does not match its model."""

    code = "invalid_message"
    errors: int | None = None  # how many problems pydantic found


def require_utf8(what: str, text: str) -> str:
    """``text`` if it encodes to UTF-8; else an InputError naming the lone surrogate."""
    utf8_bytes(what, text)
    return text


def _utf8_text(what: str) -> Any:
    def check(value: str) -> str:
        try:
            return require_utf8(what, value)
        except InputError as exc:
            raise ValueError(exc.message) from None

    return check


def _utf8_json(what: str) -> Any:
    def check(value: Any) -> Any:
        if lone_surrogate_at(json.dumps(value, ensure_ascii=False)) is not None:
            raise ValueError(f"a string in the {what} is not valid UTF-8 text (it has a "
                             "lone surrogate); send strings that encode to UTF-8")
        return value

    return check


RunId = Annotated[str, AfterValidator(name_checker("run id"))]
JobId = Annotated[str, AfterValidator(name_checker("job id"))]
Revision = Annotated[int, Field(strict=True, ge=1)]


class _Message(BaseModel):
    # Unknown fields are refused: the message schema is ours, and a field we would
    # silently drop is a field someone expected to mean something.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class DispatchJob(_Message):
    """``revise.dispatch``: one submitted run (``workers.client.Client.submit``)."""

    job_id: JobId | None = None
    run_id: RunId
    script: Annotated[str, AfterValidator(_utf8_text("script"))]
    args: Annotated[JsonValue, AfterValidator(_utf8_json("args"))]
    envelope: Envelope


class AdmissionWire(_Message):
    """``orchestrator.admission.Admission.to_wire()``: the annotated text and its sites."""

    text: Annotated[str, AfterValidator(_utf8_text("annotated script"))]
    sites: list[dict[str, JsonValue]]


class SandboxJob(_Message):
    """``revise.sandbox``: an accepted, numbered revision (``workers.dispatcher``)."""

    job_id: JobId
    run_id: RunId
    revision: Revision
    source: Annotated[str, AfterValidator(_utf8_text("script"))]
    admission: AdmissionWire
    args_text: Annotated[str, AfterValidator(_utf8_text("args text"))]
    envelope: Envelope


WAVE_CALLS = 64  # calls of one wave in one capability task at most (workers.remote)
DOORBELL = re.compile(r"^revise:[A-Za-z0-9_.-]{0,64}doorbell:[0-9a-f]{16}$")


def _doorbell(value: str) -> str:
    if not DOORBELL.match(value):
        raise ValueError("not a doorbell channel of this deployment")
    return value


class ExecuteCalls(_Message):
    """``revise.capability``: execute these claimed attempts of one revision. Only ids:
    what each call is, its payload, its key and its revision's envelope are read from the
    run store, so a forged message can at most ask for what the store already claimed."""

    run_id: RunId
    revision: Revision
    attempts: Annotated[list[Annotated[int, Field(strict=True, ge=1)]],
                        Field(min_length=1, max_length=WAVE_CALLS)]
    doorbell: Annotated[str, AfterValidator(_doorbell)] | None = None

    @model_validator(mode="after")
    def _each_once(self) -> ExecuteCalls:
        if len(set(self.attempts)) != len(self.attempts):
            raise ValueError("an attempt appears twice")
        return self


M = TypeVar("M", bound=BaseModel)


_LISTED = 8  # problems spelled out; a hostile message can have thousands


def describe(exc: ValidationError, top: str) -> str:
    """pydantic's errors as one line: ``field.path: message; ...`` (``top`` for the root).

    The offending input values are left out: they may be large, or secret."""
    errors = exc.errors(include_url=False, include_input=False)
    parts = []
    for error in errors[:_LISTED]:
        where = ".".join(str(part) for part in error["loc"]) or top
        parts.append(f"{where}: {error['msg'].removeprefix('Value error, ')}")
    more = f" (and {len(errors) - _LISTED} more)" if len(errors) > _LISTED else ""
    return "; ".join(parts) + more


def parse_message(model: type[M], data: Any, what: str) -> M:
    """``data`` as ``model``; an ``InvalidMessage`` naming every problem otherwise."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidMessage(f"invalid {what}, refused before anything ran: "
                             f"{describe(exc, what)}", errors=exc.error_count()) from None


def check_task_id(task_id: Any, what: str) -> str:
    """A task id that becomes a job id (Redis lease keys, the ids of follow-up tasks)."""
    try:
        return validate_name("job id", task_id)
    except InputError as exc:
        raise InvalidMessage(f"invalid {what}, refused before anything ran: task id: "
                             f"{exc.message}") from None


def name_in(data: Any, field: str, kind: str) -> str | None:
    """``data[field]`` if it is a valid ``kind`` name, else None: what a refused message's
    answer may echo back without repeating anything hostile."""
    value = data.get(field) if isinstance(data, dict) else None
    try:
        return validate_name(kind, value)
    except InputError:
        return None

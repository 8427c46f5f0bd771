"""Names that clients choose and Revise turns into paths and keys: run ids, job ids.

A run id becomes a directory (``$REVISE_HOME/runs/<run id>/rev-N``, whose RPC
directory is world-writable and which a rerun deletes), a Redis key and part of
Celery task ids; a job id becomes a Celery task id and Redis lease keys. So a
name must be exactly one harmless path component and one unambiguous key
segment, on every filesystem we run on:

    [A-Za-z0-9][A-Za-z0-9._-]{0,127}

ASCII letters, digits, ``.``, ``_`` and ``-``; 1 to 128 characters; the first
one a letter or digit. That excludes ``/`` and ``\\`` (no nesting, no escape
from the runs directory), ``.`` and ``..``, hidden names (leading dot), option
look-alikes (leading ``-``), NUL and control characters, whitespace, ``:`` and
``*`` (Redis key separators and glob patterns), and names longer than common
file-name limits once a suffix is added.

``validate_name`` is called at every entry (CLI, queue client, dispatcher, run
store), so a bad name is refused with the same clear message wherever it enters.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from broker.errors import InputError

NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
MAX_NAME_LENGTH = 128
_NAME = re.compile(NAME_PATTERN)
_SHOWN = 40  # characters of an offending value quoted in a message


def _shown(value: str) -> str:
    """The value quoted safely: repr escapes NUL, control characters and surrogates."""
    if len(value) <= _SHOWN:
        return repr(value)
    return f"{value[:_SHOWN]!r}... ({len(value)} characters)"


def _why(value: str) -> str:
    if not value:
        return "it is empty"
    if len(value) > MAX_NAME_LENGTH:
        return f"it is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}"
    if set(value) == {"."}:
        return "it is only dots (a relative path)"
    bad = next((c for c in value if not re.fullmatch(r"[A-Za-z0-9._-]", c)), None)
    if bad is not None:
        what = "a path separator" if bad in "/\\" else f"the character {bad!r}"
        return f"it contains {what}"
    return f"it starts with {value[0]!r}; the first character must be a letter or digit"


def validate_name(kind: str, value: object) -> str:
    """Return ``value`` if it is a valid ``kind`` (e.g. "run id"); else raise InputError."""
    if not isinstance(value, str):
        raise InputError(f"{kind} must be a string, got {type(value).__name__}; "
                         f"use a name such as 'shots-2024.1'", field=kind)
    # Only-dots names can never match (the first character must be alphanumeric);
    # checked on its own anyway so that widening the pattern cannot let '..' through.
    if _NAME.fullmatch(value) is None or set(value) <= {"."}:
        raise InputError(
            f"{kind} {_shown(value)} is not allowed: {_why(value)}. A {kind} becomes a "
            f"directory name and a queue key, so it must match {NAME_PATTERN} (1-"
            f"{MAX_NAME_LENGTH} ASCII letters, digits, '.', '_' or '-', starting with a "
            f"letter or digit); for example 'shots-2024.1'",
            field=kind, value=_shown(value))
    return value


def is_valid_name(value: object) -> bool:
    try:
        validate_name("name", value)
    except InputError:
        return False
    return True


def name_checker(kind: str) -> Callable[[str], str]:
    """A pydantic ``AfterValidator`` function for a field that holds a ``kind`` name.

    pydantic reports only ``ValueError`` as a validation error, so the InputError's
    message is carried over in one.
    """

    def check(value: str) -> str:
        try:
            return validate_name(kind, value)
        except InputError as exc:
            raise ValueError(exc.message) from None

    return check

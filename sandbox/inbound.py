"""What the host accepts from a sandbox, field by field (``sandbox.language.LIMITS``).

Every message the sandbox sends is hostile. The channel parses it (bounded in bytes
and depth as a whole) and hands it here: each message kind has a closed set of fields,
and every field is held to its type and to its limit in the one table the checker and
the runtime read too. An honest runtime never sends past these limits (it refuses a
payload, a result or a wave that would be, with an error the script sees), so anything
past them is a sandbox that ignores the rules: ``SandboxProtocolError``, naming the
field. What a field *means* (a site the host annotated, the occurrence it expects, a
path the admitted script can reach) is the session's to judge; this module bounds
what the host holds while it judges.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from broker.errors import SandboxProtocolError
from sandbox.language import LIMITS, value_problem

Check = Callable[[Any, str], None]

_FRAME_KINDS = ("call", "race_lookup", "race_commit")


def _fail(where: str, problem: str) -> SandboxProtocolError:
    return SandboxProtocolError(f"{where} from the sandbox {problem}")


def _text(limit: str) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, str):
            raise _fail(where, "is not a string")
        if len(value) > LIMITS[limit]:
            raise _fail(where, f"is longer than {LIMITS[limit]} characters ({limit})")
    return check


def _number(value: Any, where: str) -> None:
    if not (isinstance(value, int) and not isinstance(value, bool)):
        raise _fail(where, "is not an integer")
    if abs(value) > LIMITS["number"]:
        raise _fail(where, f"is past {LIMITS['number']} (number)")


def _flag(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise _fail(where, "is not true or false")


def _seconds(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(where, "is not a number")


def _optional(check: Check) -> Check:
    def optional(value: Any, where: str) -> None:
        if value is not None:
            check(value, where)
    return optional


def _value(limit: str) -> Check:
    """A JSON value: its shape (depth, values) and its size as the runtime measures it."""
    def check(value: Any, where: str) -> None:
        problem = value_problem(value)
        if problem is not None:
            raise _fail(where, f"{problem} (value_depth, value_items)")
        size = len(json.dumps(value, separators=(",", ":")))
        if size > LIMITS[limit]:
            raise _fail(where, f"is {size} bytes; the limit is {LIMITS[limit]} ({limit})")
    return check


def _list(limit: str, item: Check) -> Check:
    def check(value: Any, where: str) -> None:
        if not isinstance(value, list):
            raise _fail(where, "is not a list")
        if len(value) > LIMITS[limit]:
            raise _fail(where, f"has more than {LIMITS[limit]} items ({limit})")
        for index, one in enumerate(value):
            item(one, f"{where}[{index}]")
    return check


def _text_or_number(value: Any, where: str) -> None:
    if isinstance(value, str):
        _text("error_chars")(value, where)
    else:
        _number(value, where)


def _record(fields: dict[str, Check], required: tuple[str, ...] = ()) -> Check:
    """An object with only these fields (each optional unless required)."""
    def check(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            raise _fail(where, "is not an object")
        extra = sorted(str(k)[:40] for k in value if k not in fields)
        if extra:
            raise _fail(where, f"has unknown fields {extra[:5]}")
        missing = [name for name in required if name not in value]
        if missing:
            raise _fail(where, f"lacks {', '.join(missing)}")
        for name, field_check in fields.items():
            if name in value:
                field_check(value[name], f"{where}.{name}")
    return check


_IDENTITY: dict[str, Check] = {
    "seq": _number, "kind": _text("name_chars"), "site": _text("site_chars"),
    "path": _list("path_length", _number), "occurrence": _number}
_BRANCH = _optional(_record({"finished": _flag, "site": _text("site_chars"),
                             "capability": _text("name_chars"),
                             "payload": _value("frame_bytes"), "take": _number}))
_FRAMES: dict[str, Check] = {
    "call": _record({**_IDENTITY, "capability": _text("name_chars"),
                     "payload": _value("frame_bytes"), "take": _number}, tuple(_IDENTITY)),
    "race_lookup": _record({**_IDENTITY, "branches": _list("fanout_width", _BRANCH)},
                           (*_IDENTITY, "branches")),
    "race_commit": _record({**_IDENTITY, "winner": _number}, (*_IDENTITY, "winner")),
}


def _frame(value: Any, where: str) -> None:
    kind = value.get("kind") if isinstance(value, dict) else None
    if kind not in _FRAMES:
        raise _fail(where, f"is of unknown kind {str(kind)[:40]!r}")
    _FRAMES[kind](value, where)


_ERROR = _record({"type": _text("name_chars"), "message": _text("error_chars"),
                  "line": _optional(_number),
                  **{name: _optional(_text_or_number)
                     for name in ("code", "capability", "identity", "status", "charged")}})
_MESSAGES: dict[str, Check] = {
    "batch": _record({"t": _text("name_chars"), "nonce": _text("name_chars"),
                      "frames": _list("wave_frames", _frame), "more": _flag},
                     ("t", "nonce", "frames")),
    "result": _record({"t": _text("name_chars"), "nonce": _text("name_chars"), "ok": _flag,
                       "result": _value("result_bytes"),
                       "logs": _list("log_lines", _text("log_line_chars")), "error": _ERROR,
                       "seconds": _seconds, "stopped": _flag}, ("t", "nonce", "ok")),
}

def check_message(message: dict[str, Any]) -> None:
    """Every field of one message from the sandbox within its type and limit, or
    ``SandboxProtocolError`` naming the field."""
    kind = message.get("t")
    if kind not in _MESSAGES:
        raise SandboxProtocolError(f"the sandbox sent an unknown message {str(kind)[:40]!r}")
    _MESSAGES[kind](message, kind)

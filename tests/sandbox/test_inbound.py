"""What the host accepts from a sandbox, field by field (``sandbox.inbound``): every field
of every message kind held to its type and to its limit in ``sandbox.language.LIMITS``,
and the messages an honest runtime sends pass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from broker.errors import SandboxProtocolError
from sandbox.inbound import check_message
from sandbox.language import LIMITS

CALL = {"seq": 1, "kind": "call", "site": "orchestrate/#0", "path": [0, 2], "occurrence": 0,
        "capability": "text.generate", "payload": {"prompt": "x"}, "take": 1}
LOOKUP = {"seq": 2, "kind": "race_lookup", "site": "orchestrate/#1", "path": [],
          "occurrence": 0, "branches": [
              None, {"finished": True},
              {"site": "orchestrate/#2", "capability": "text.generate",
               "payload": {"prompt": "a"}, "take": 1}]}
COMMIT = {"seq": 3, "kind": "race_commit", "site": "orchestrate/#1", "path": [],
          "occurrence": 0, "winner": 2}
BATCH = {"t": "batch", "nonce": "n" * 32, "frames": [CALL, LOOKUP, COMMIT], "more": False}
RESULT = {"t": "result", "nonce": "n" * 32, "ok": False, "logs": ["one", "two"],
          "seconds": 0.25, "stopped": True, "error": {
              "type": "CapabilityError", "message": "m", "line": None, "code": "bad_size",
              "capability": "image.generate", "identity": "orchestrate/#0 [] 0",
              "status": 400, "charged": "no"}}
BIG = "x" * (LIMITS["frame_bytes"] + 1)


def _with(message: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(message)
    place = changed
    for step in path[:-1]:
        place = place[step]
    place[path[-1]] = value
    return changed


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def test_what_an_honest_runtime_sends_passes() -> None:
    check_message(BATCH)
    check_message(RESULT)
    check_message({"t": "result", "nonce": "n", "ok": True, "result": {"a": [1, 2.5, None]},
                   "logs": [], "seconds": 1})
    check_message(_with(BATCH, ("frames", 0, "payload"), {"prompt": _nested(30)}))


# (what, message, field named in the error)
REFUSED = [
    ("unknown message kind", {"t": "exec", "nonce": "n"}, "unknown message"),
    ("unknown batch field", _with(BATCH, ("pad",), "x"), "unknown fields ['pad']"),
    ("batch without frames", {"t": "batch", "nonce": "n"}, "lacks frames"),
    ("nonce too long", _with(BATCH, ("nonce",), "n" * 101), "batch.nonce"),
    ("more not a flag", _with(BATCH, ("more",), 1), "batch.more"),
    ("too many frames", _with(BATCH, ("frames",), [CALL] * (LIMITS["wave_frames"] + 1)),
     "wave_frames"),
    ("frame of unknown kind", _with(BATCH, ("frames", 0, "kind"), "shell"), "unknown kind"),
    ("unknown frame field", _with(BATCH, ("frames", 0, "winner"), 0), "unknown fields"),
    ("call without a site", {**BATCH, "frames": [{k: v for k, v in CALL.items()
                                                   if k != "site"}]}, "lacks site"),
    ("seq a string", _with(BATCH, ("frames", 0, "seq"), "1"), "frames[0].seq"),
    ("seq a flag", _with(BATCH, ("frames", 0, "seq"), True), "frames[0].seq"),
    ("seq past the number limit", _with(BATCH, ("frames", 0, "seq"), 2**53 + 1), "number"),
    ("site too long", _with(BATCH, ("frames", 0, "site"), "s" * 4097), "site_chars"),
    ("path too long", _with(BATCH, ("frames", 0, "path"), [0] * 65), "path_length"),
    ("path of strings", _with(BATCH, ("frames", 0, "path"), ["0"]), "path[0]"),
    ("occurrence a float", _with(BATCH, ("frames", 0, "occurrence"), 0.0), "occurrence"),
    ("capability too long", _with(BATCH, ("frames", 0, "capability"), "c" * 101),
     "name_chars"),
    ("payload too large", _with(BATCH, ("frames", 0, "payload"), {"p": BIG}), "frame_bytes"),
    ("payload too deep", _with(BATCH, ("frames", 0, "payload"), _nested(40)), "value_depth"),
    ("payload of too many values", _with(BATCH, ("frames", 0, "payload"),
                                         [0] * (LIMITS["value_items"] + 1)), "value_items"),
    ("too many race branches", _with(BATCH, ("frames", 1, "branches"),
                                     [None] * (LIMITS["fanout_width"] + 1)), "fanout_width"),
    ("race branch payload too large", _with(BATCH, ("frames", 1, "branches", 2, "payload"),
                                            BIG), "frame_bytes"),
    ("race branch unknown field", _with(BATCH, ("frames", 1, "branches", 2, "x"), 1),
     "branches[2]"),
    ("race winner a string", _with(BATCH, ("frames", 2, "winner"), "0"), "winner"),
    ("result too large", {"t": "result", "nonce": "n", "ok": True,
                          "result": "r" * (LIMITS["result_bytes"] + 1)}, "result_bytes"),
    ("too many log lines", _with(RESULT, ("logs",), ["l"] * (LIMITS["log_lines"] + 1)),
     "log_lines"),
    ("log line too long", _with(RESULT, ("logs",), ["l" * 2001]), "log_line_chars"),
    ("error type too long", _with(RESULT, ("error", "type"), "T" * 101), "error.type"),
    ("error message too long", _with(RESULT, ("error", "message"), "m" * 4001),
     "error_chars"),
    ("error identity too long", _with(RESULT, ("error", "identity"), "i" * 4001),
     "error.identity"),
    ("error code a dict", _with(RESULT, ("error", "code"), {"a": 1}), "error.code"),
    ("error status a huge number", _with(RESULT, ("error", "status"), 10**30),
     "error.status"),
    ("error line a flag", _with(RESULT, ("error", "line"), True), "error.line"),
    ("unknown error field", _with(RESULT, ("error", "trace"), "x"), "unknown fields"),
    ("seconds a string", _with(RESULT, ("seconds",), "1"), "result.seconds"),
]


@pytest.mark.parametrize(("what", "message", "named"), REFUSED, ids=[r[0] for r in REFUSED])
def test_a_field_past_its_type_or_limit_stops_the_run(what: str, message: dict[str, Any],
                                                      named: str) -> None:
    with pytest.raises(SandboxProtocolError) as caught:
        check_message(message)
    assert named in caught.value.message

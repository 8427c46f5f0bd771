"""The sandbox runtime's JSON (``sandbox.runtime.dumps`` / ``loads``): CPython's C codec
used without the json package, which must say exactly what ``json`` says, text and
errors, and the json package itself where the C codec is missing."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox import runtime

ROOT = Path(__file__).resolve().parents[2]

scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False,
           allow_infinity=False) | st.text())
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text() | st.integers() | st.booleans() | st.none(), inner, max_size=4), max_leaves=20)


def _json_dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def _outcome(dump: Any, value: Any) -> tuple[str, str]:
    try:
        return "ok", dump(value)
    except (TypeError, ValueError) as exc:
        return type(exc).__name__, str(exc)


@given(values)
def test_dumps_writes_what_json_writes(value: Any) -> None:
    assert runtime.dumps(value) == _json_dumps(value)


@given(values)
def test_loads_reads_what_json_wrote(value: Any) -> None:
    assert runtime.loads(_json_dumps(value).encode()) == json.loads(_json_dumps(value))


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize("value", [
    {1, 2}, {"a": {1}}, float("nan"), [float("inf")], -math.inf, {(1, 2): "tuple key"},
    b"bytes", object(), _circular(), {"x": [1, {"y": complex(1, 2)}]}])
def test_what_is_not_json_fails_as_json_fails(value: Any) -> None:
    assert _outcome(runtime.dumps, value) == _outcome(_json_dumps, value)
    assert _outcome(runtime.dumps, value)[0] != "ok"


@pytest.mark.parametrize("text", [b"", b"{", b"[1,", b"{} {}", b"nul", b"[1] x", b"\xff"])
def test_loads_refuses_what_is_not_one_json_value(text: bytes) -> None:
    with pytest.raises(ValueError):
        runtime.loads(text)


def test_loads_allows_surrounding_whitespace_and_json_constants() -> None:
    assert runtime.loads(b' \n{"a": [1, 2.5, "\\u00e9", null, true]}\r\n') == {
        "a": [1, 2.5, "é", None, True]}
    assert math.isnan(runtime.loads(b"NaN")) and runtime.loads(b"-Infinity") == -math.inf


def test_the_runtime_starts_without_the_json_re_enum_and_socket_packages() -> None:
    """What starting the runtime imports, in the sandbox's own interpreter flags, run as
    the sandbox runs it: the file beside ``language.py``, not the host's package."""
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import runtime as r; "
             "r.dumps({'a': [1]}); r.loads(b'[1]'); "
             "print(sorted(m for m in ('json', 're', 'enum', 'socket', 'collections', "
             "'functools', 'struct') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-S", "-B", "-c", probe,
                           str(ROOT / "sandbox")],
                          capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stdout


def test_without_the_c_codec_the_json_package_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "_JSON", None)
    monkeypatch.setattr(runtime, "_SCAN", None)
    assert runtime.dumps({"a": [1, "é"]}) == '{"a":[1,"\\u00e9"]}'
    assert runtime.loads(b'{"a": [1]}') == {"a": [1]}
    with pytest.raises(ValueError):
        runtime.dumps(float("nan"))

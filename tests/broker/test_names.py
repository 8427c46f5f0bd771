"""Names that become paths and keys: the pattern, its messages, and the store's backstop."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import InputError
from broker.names import MAX_NAME_LENGTH, NAME_PATTERN, is_valid_name, validate_name

BAD = {
    "parent escape": "../../x",
    "nested": "a/b",
    "backslash": "a\\b",
    "absolute": "/etc",
    "empty": "",
    "dot": ".",
    "dot dot": "..",
    "dots": "...",
    "hidden": ".revise",
    "option": "-rf",
    "too long": "r" * (MAX_NAME_LENGTH + 1),
    "200 chars": "x" * 200,
    "nul": "a\x00b",
    "newline": "run\n",
    "space": "my run",
    "colon": "a:b",
    "glob": "a*",
    "non-ascii": "r\u00e9sum\u00e9",
    "surrogate": "a\ud800",
}

GOOD = ["r", "R", "run-1", "shots-2024.1", "a..b", "a_b", "x" * MAX_NAME_LENGTH, "9"]


@pytest.mark.parametrize("value", GOOD)
def test_valid_names_are_returned_unchanged(value: str) -> None:
    assert validate_name("run id", value) == value


@pytest.mark.parametrize("value", list(BAD.values()), ids=list(BAD))
def test_invalid_names_get_a_clear_error(value: str) -> None:
    with pytest.raises(InputError) as caught:
        validate_name("run id", value)
    message = caught.value.message
    assert message.startswith("run id ")
    assert NAME_PATTERN in message and "for example 'shots-2024.1'" in message
    # The offending value is shown escaped and short: no raw control characters.
    assert "\x00" not in message and "\n" not in message
    assert len(message) < 500
    assert caught.value.code == "input_error"


def test_the_message_says_what_is_wrong() -> None:
    def why(value: str) -> str:
        with pytest.raises(InputError) as caught:
            validate_name("job id", value)
        return caught.value.message

    assert "path separator" in why("../../x")
    assert "empty" in why("")
    assert "only dots" in why("..")
    assert "200 characters long" in why("x" * 200)
    assert "'\\x00'" in why("a\x00b")
    assert "starts with '-'" in why("-x")
    assert why("x" * 200).count("x") < 60  # truncated, not the whole value
    assert why("a/b").startswith("job id 'a/b' is not allowed")


def test_non_strings_are_refused() -> None:
    for value in (None, 3, b"run", ["r"]):
        with pytest.raises(InputError, match="must be a string"):
            validate_name("run id", value)


def test_the_error_survives_pickling() -> None:
    with pytest.raises(InputError) as caught:
        validate_name("run id", "../x")
    again = pickle.loads(pickle.dumps(caught.value))
    assert again.message == caught.value.message and again.field == "run id"


def _stays_a_child(home: Path, name: str) -> None:
    assert Path(name).name == name and len(Path(name).parts) == 1
    assert os.sep not in name and (os.altsep is None or os.altsep not in name)
    target = Path(home, name).resolve()
    assert target.parent == home.resolve()
    assert target.name == name


@given(st.from_regex(NAME_PATTERN, fullmatch=True))
def test_every_name_the_pattern_allows_is_accepted_and_one_path_component(name: str) -> None:
    assert validate_name("run id", name) == name
    _stays_a_child(Path("/srv/revise/runs"), name)


@given(st.text(max_size=200))
def test_any_accepted_text_stays_under_home(text: str) -> None:
    if is_valid_name(text):
        _stays_a_child(Path("/srv/revise/runs"), text)
    else:
        with pytest.raises(InputError):
            validate_name("run id", text)


@given(st.text(alphabet="./\\-_a\x00", max_size=12))
def test_separator_and_dot_soup_never_escapes(text: str) -> None:
    if is_valid_name(text):
        assert "/" not in text and "\\" not in text and "\x00" not in text
        assert text[0] not in ".-_" and set(text) != {"."}


# ---- the run store refuses to create a run under a bad name (last line of defence) --------


@pytest.mark.parametrize("run_id", ["../x", "a/b", "", "..", "x" * 200, "a\x00b"])
def test_store_refuses_bad_run_ids(store, run_id: str) -> None:
    with pytest.raises(InputError, match="run id"):
        store.ensure_run(run_id)
    assert store.list_runs() == []


def test_store_still_creates_valid_runs(store) -> None:
    assert store.ensure_run("shots-2024.1").run_id == "shots-2024.1"


def test_store_transaction_writer_refuses_bad_run_ids(store) -> None:
    from broker.sqlstore import ensure_run_txn

    with store.engine.connect() as conn, conn.begin(), pytest.raises(InputError):
        ensure_run_txn(conn, "../../x")
    assert store.list_runs() == []

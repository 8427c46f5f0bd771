from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.errors import InputError
from broker.identity import Identity, payload_digest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                 max_size=4),
    max_leaves=12)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_digest_ignores_key_order(payload: dict) -> None:
    reordered = dict(reversed(list(payload.items())))
    assert payload_digest(reordered) == payload_digest(payload)


def test_digest_rejects_nan() -> None:
    with pytest.raises(InputError):
        payload_digest({"x": float("nan")})


@pytest.mark.parametrize("text", ["orchestrate/#0@:0", "orchestrate.gen/#1@3.0:2",
                                  "orchestrate/for0/if1/#0@1:5"])
def test_identity_text_round_trip(text: str) -> None:
    assert str(Identity.parse(text)) == text


def test_identity_parse_error_names_the_format() -> None:
    with pytest.raises(InputError, match="SITE@PATH:OCCURRENCE"):
        Identity.parse("not an identity")

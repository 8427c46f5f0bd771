"""A Retry-After header, read the two ways RFC 9110 allows, and junk refused (None)."""

from __future__ import annotations

import email.utils

import pytest

from broker.retry_after import retry_after_seconds, wait_asked

NOW = 1_800_000_000.0


@pytest.mark.parametrize("value, seconds", [
    ("7", 7.0), ("0", 0.0), (" 5 ", 5.0), ("2.5", 2.5),
    (email.utils.formatdate(NOW + 30, usegmt=True), 30.0),
    (email.utils.formatdate(NOW + 30, usegmt=False), 30.0),  # "-0000": UTC
    (email.utils.formatdate(NOW - 30, usegmt=True), 0.0),  # passed: go now
])
def test_seconds_and_dates(value: str, seconds: float) -> None:
    assert retry_after_seconds(value, NOW) == pytest.approx(seconds)


@pytest.mark.parametrize("value", [
    None, "", "soon", "-1", "nan", "inf", "-inf", "1e308", "86401",
    "Wed, 21 Oct", "Mon, 99 Foo 2015 99:99:99 GMT",
    email.utils.formatdate(NOW + 2 * 86400, usegmt=True),
])
def test_nothing_usable_is_none(value: str | None) -> None:
    assert retry_after_seconds(value, NOW) is None


@pytest.mark.parametrize("headers, seconds", [
    ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),  # OpenAI's, milliseconds, first
    ({"retry-after-ms": "junk", "retry-after": "9"}, 9.0),
    ({"retry-after-ms": "-5", "retry-after": "9"}, 9.0),
    ({"retry-after-ms": "nan"}, None),
    ({"retry-after": email.utils.formatdate(NOW + 30, usegmt=True)}, 30.0),
    ({}, None),
])
def test_the_wait_asked_prefers_milliseconds(headers: dict[str, str],
                                             seconds: float | None) -> None:
    assert wait_asked(headers, NOW) == (None if seconds is None else pytest.approx(seconds))

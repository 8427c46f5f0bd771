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


@pytest.mark.parametrize("headers, seconds", [
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1m30.5s",
      "x-ratelimit-remaining-tokens": "10", "x-ratelimit-reset-tokens": "6m0s"}, 90.5),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "20ms"}, 0.02),
    ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "2s",
      "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1h"}, 3600.0),
    ({"x-ratelimit-remaining-tokens": "5", "x-ratelimit-reset-tokens": "20s"}, None),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "soon"}, None),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s junk"}, None),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "99999h"}, None),
    ({"retry-after": "3", "x-ratelimit-remaining-tokens": "0",
      "x-ratelimit-reset-tokens": "20s"}, 3.0),
], ids=["requests used up", "tokens used up", "both: the longer", "not used up", "junk",
        "junk after a duration", "past a day", "Retry-After first"])
def test_without_retry_after_a_used_up_openai_limit_waits_until_it_resets(
        headers: dict[str, str], seconds: float | None) -> None:
    """OpenAI may send no Retry-After with a 429, only when each of its limits resets."""
    assert wait_asked(headers, now=0) == seconds

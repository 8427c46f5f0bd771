"""The wait a rate-limited answer asks for (pure): ``Retry-After`` (RFC 9110, 10.2.3:
delta-seconds or an HTTP date), or OpenAI's ``retry-after-ms`` before it; failing both,
when an OpenAI limit is used up, the time until it resets (``x-ratelimit-reset-*``)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime

LONGEST_SECONDS = 86400.0  # past a day the value is junk, and every caller caps lower


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Seconds to wait from the header's value at ``now`` (a POSIX time): a date becomes
    the seconds until it (0 when it has passed). None when there is nothing usable: no
    header, junk, a negative number, NaN or infinity, or more than a day."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # "-0000": UTC, with nothing said about the sender's zone
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, when.timestamp() - now)
    return _usable(seconds)


def wait_asked(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds an answer's headers ask to wait (names lower-cased, as httpx gives them):
    ``retry-after-ms`` (OpenAI's, in milliseconds) before ``retry-after``; None when
    neither says anything usable."""
    try:
        seconds = _usable(float(headers.get("retry-after-ms") or "nan") / 1000)
    except ValueError:
        seconds = None
    if seconds is None:
        seconds = retry_after_seconds(headers.get("retry-after"), now)
    return seconds if seconds is not None else _until_reset(headers)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _until_reset(headers: Mapping[str, str]) -> float | None:
    """The longest wait until a used-up limit resets: OpenAI's ``x-ratelimit-remaining-
    requests`` / ``-tokens`` at 0 beside their ``x-ratelimit-reset-*`` ("1s", "6m0s",
    "20ms"); None when no limit is said to be used up."""
    waits = []
    for limit in ("requests", "tokens"):
        if headers.get(f"x-ratelimit-remaining-{limit}", "").strip() != "0":
            continue
        duration = headers.get(f"x-ratelimit-reset-{limit}", "").strip()
        parts = _DURATION.findall(duration)
        if parts and "".join(n + u for n, u in parts) == duration:
            waits.append(sum(float(n) * _UNIT[u] for n, u in parts))
    return _usable(max(waits)) if waits else None


def _usable(seconds: float) -> float | None:
    """``seconds`` when it is a wait: finite, not negative, at most a day."""
    return seconds if math.isfinite(seconds) and 0 <= seconds <= LONGEST_SECONDS else None

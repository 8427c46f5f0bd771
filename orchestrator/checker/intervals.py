"""Small arithmetic on upper bounds and integer intervals; ``None`` means unbounded."""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[int | None, int | None]
UNKNOWN: Interval = (None, None)


def sum_bound(values: Iterable[int | None]) -> int | None:
    total = 0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def max_bound(values: Iterable[int | None], default: int = 0) -> int | None:
    result = default
    for value in values:
        if value is None:
            return None
        result = max(result, value)
    return result


def union(intervals: list[Interval]) -> Interval:
    if not intervals:
        return UNKNOWN
    los, his = [i[0] for i in intervals], [i[1] for i in intervals]
    lo = None if any(v is None for v in los) else min(v for v in los if v is not None)
    hi = None if any(v is None for v in his) else max(v for v in his if v is not None)
    return lo, hi


def max_of(values: list[int | None]) -> int | None:
    return max_bound(values)


def mul(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a * b


def add(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def neg(a: int | None) -> int | None:
    return None if a is None else -a


def dec(a: int | None) -> int | None:
    return None if a is None else a - 1

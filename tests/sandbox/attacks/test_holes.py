"""Holes the attack corpus found, one test each, named after the hole."""

from __future__ import annotations

import time

import pytest

from orchestrator.checker import check

_ENTRY = "\n\nasync def orchestrate(ctx, args):\n    return len(A)\n"


def _chain(first: str, step: str, n: int) -> str:
    lines = [f"A0 = {first}"] + [f"A{i} = {step.format(p=f'A{i - 1}')}" for i in range(1, n)]
    return "\n".join(lines) + f"\nA = A{n - 1}" + _ENTRY


@pytest.mark.parametrize("source", [
    _chain("[1, 2]", "[{p}, {p}]", 60),  # 2**60 items as a tree, 60 objects
    _chain("(1, 2)", "({p}, {p}, {p})", 40),
    _chain("{'k': [1]}", "{{'a': {p}, 'b': {p}}}", 60),
    "A = [[[[[[0] * 50] * 50] * 50] * 50] * 50] * 50" + _ENTRY,  # one expression, 50**6
], ids=["list-doubling", "tuple-tripling", "dict-doubling", "nested-repeat"])
def test_hole_checker_walked_shared_constants_as_trees(source: str) -> None:
    """Hole: R11's mutable-depth walk (and any walk of a folded constant) visited a part
    shared by reference once per appearance, so ``A1 = [A0, A0]`` ... ``A59`` (valid,
    60 short lines) kept ``revise check`` and the dispatcher busy for hours. A constant
    is now sized as a tree when folded, memoised per object, and refused past the limit."""
    started = time.monotonic()
    report = check(source)
    assert time.monotonic() - started < 5
    assert not report.valid
    assert any(v.rule == "R00" and "huge literal" in v.message for v in report.violations)


def test_shared_constants_within_the_limit_stay_valid() -> None:
    report = check(_chain("[1, 2]", "[{p}, {p}]", 10))  # 2**11 items as a tree
    assert report.valid, report.violations

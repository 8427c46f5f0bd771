"""Property tests: check never raises, always returns a CheckReport, never reports an
internal failure, and is deterministic, on random text and random valid Python."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.checker import CheckReport, check

_SETTINGS = settings(max_examples=150, deadline=None,
                     suppress_health_check=list(HealthCheck))


def _assert_sound(source: str) -> None:
    report = check(source)
    assert isinstance(report, CheckReport)
    assert report.valid == (not any(v.severity == "error" for v in report.violations))
    assert not any("could not analyse" in v.message for v in report.violations), report
    keys = [(v.line, v.rule) for v in report.violations]
    assert keys == sorted(keys)
    assert check(source) == report


@_SETTINGS
@given(st.text(max_size=2000))
def test_random_text(source: str) -> None:
    _assert_sound(source)


_FRAGMENTS = st.sampled_from([
    "x = 1", "for i in range(3):", "    pass", "while x:", "async def f(ctx):",
    "    return await ctx.run('image.generate', {'p': i})", "def g(a, *b, **c):",
    "return [y for y in args['a'][:4]]", "tasks = []", "tasks.append(f(ctx))",
    "await ctx.parallel(tasks)", "import os", "try:", "except Exception:", "class A:",
    "lambda: 0", "x = {1, 2}", "for k in x:", "    x.append(k)", "ctx.log('x')",
    "if x:", "else:", "(((", ")))", "'''", "'_site'", "__import__('os')", "yield 1",
    "global x", "x: int = 3", "del x", "with a as b:", "match x:", "  case 1:",
])


@_SETTINGS
@given(st.lists(st.tuples(st.integers(0, 3), _FRAGMENTS), max_size=30))
def test_random_script_fragments(lines: list[tuple[int, str]]) -> None:
    body = "\n".join("    " * (indent + 1) + text for indent, text in lines)
    _assert_sound("async def orchestrate(ctx, args):\n" + body + "\n")


hypothesmith = pytest.importorskip("hypothesmith")


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(hypothesmith.from_grammar())
def test_random_valid_python(source: str) -> None:
    _assert_sound(source)


_PIECES = [*"()[]{}-+~* \n\t'\"#\\ab", "not ", "await ", "lambda ", '"""', "'''"]
_CODEISH = st.lists(st.sampled_from(_PIECES), max_size=300).map("".join)


@_SETTINGS
@given(_CODEISH)
def test_quick_prescan_never_hides_what_the_token_scan_finds(text: str) -> None:
    from orchestrator.checker import limits

    if limits._surely_shallow(text) and limits.token_scan(text) is not None:
        # Only text the tokenizer cannot read (an unterminated string) may differ; the
        # parser rejects it anyway, so the verdict is R00 either way.
        tree, failure = limits.parse(text)
        assert tree is None and failure is not None and failure.rule == "R00"

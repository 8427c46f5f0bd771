from __future__ import annotations

import ast

import pytest

from broker.errors import AnnotationError
from orchestrator.annotate import annotate, verify_annotation

SOURCE = '''async def orchestrate(ctx, args):
    a = await ctx.run("text.generate", {"prompt": "é ünïcode"})
    b = await ctx.run(
        "text.generate",
        {"prompt": "two"},  # a comment, with a comma)
    )
    c = await ctx.run("text.generate", ({"prompt": "parenthesized"}))
    d = await ctx.race([ctx.run("text.generate", {"prompt": "x"})])
    return [a, b, c, d]
'''


def test_annotation_keeps_lines_and_marks_every_call() -> None:
    annotated = annotate(SOURCE)
    verify_annotation(annotated)
    assert annotated.text.count("\n") == SOURCE.count("\n")
    for before, after in zip(SOURCE.splitlines(), annotated.text.splitlines(), strict=True):
        if "_site" in after:
            assert after.startswith(before.rstrip(")").rstrip()[:10])
    tree = ast.parse(annotated.text)
    sites = [kw.value.value for node in ast.walk(tree) if isinstance(node, ast.Call)
             for kw in node.keywords if kw.arg == "_site"]
    assert sorted(sites) == sorted(s.site for s in annotated.sites)
    assert len(sites) == 5


def test_existing_matching_site_is_accepted_and_idempotent() -> None:
    once = annotate(SOURCE)
    twice = annotate(once.text)
    assert twice.text == once.text


def test_forged_site_is_rejected() -> None:
    forged = SOURCE.replace('{"prompt": "two"},', '{"prompt": "two"}, _site="orchestrate/#0",')
    with pytest.raises(AnnotationError):
        annotate(forged)

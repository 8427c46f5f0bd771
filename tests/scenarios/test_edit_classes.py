"""The paper's Table VII: seven edit classes on three committed scripts, through the gate.

Every edit to the argument AST of a frozen call is `call_changed`; every edit
that removes a frozen callsite is `removed`; edits to surrounding statements,
call-free insertions and appends are accepted. Moving a frozen call into a new
block is `removed` under the paper's strict gate (``relocation="stop"``) and an
accepted relocation under the default, because the moved call keeps its
expression and is the only match.
"""

from __future__ import annotations

import ast

import pytest

from broker.envelope import Envelope
from orchestrator.gate import check_gate, frozen_sites
from orchestrator.sites import assign_sites

from .conftest import Harness

FANOUT = '''async def orchestrate(ctx, args):
    style = "watercolor"

    async def gen(shot):
        return await ctx.run("image.generate", {"prompt": shot + ", " + style})

    images = await ctx.parallel([gen(s) for s in args["shots"][:4]])
    return [i["artifact"]["id"] for i in images[:4]]
'''

HELPER = '''async def orchestrate(ctx, args):
    plan = await ctx.run("storyboard.plan", {"brief": args["brief"], "shots": 2})

    async def draw(shot):
        return await ctx.run("image.generate", {"prompt": shot})

    first = await draw(plan["shots"][0])
    return first["artifact"]["id"]
'''

LOOP = '''async def orchestrate(ctx, args):
    kept = []
    for i in range(2):
        image = await ctx.run("image.generate", {"prompt": f"take {i}"})
        review = await ctx.run("review.visual", {"image": image["artifact"]})
        kept.append(review["verdict"])
    return kept
'''

APPEND = '    extra = await ctx.run("text.generate", {"prompt": "summary"})\n'

# (script, args, {edit class: (old text, new text)})
CASES = {
    "fanout": (FANOUT, {"shots": ["a", "b", "c", "d"]}, {
        "literal in payload": ('shot + ", " + style', 'shot + "; " + style'),
        "computed payload": ('shot + ", " + style', '(shot + ", " + style).strip()'),
        "statement outside": ('style = "watercolor"', 'style = "oil on canvas"'),
        "insert non-call statement": ("        return await ctx.run",
                                      "        shot = shot.strip()\n"
                                      "        return await ctx.run"),
        "wrap in new block": ("        return await ctx.run(\"image.generate\", "
                              "{\"prompt\": shot + \", \" + style})",
                              "        if shot:\n            return await ctx.run("
                              "\"image.generate\", {\"prompt\": shot + \", \" + style})"),
        "delete a call": ('        return await ctx.run("image.generate", '
                          '{"prompt": shot + ", " + style})', "        return shot"),
        "append a new call": ("    return [i", APPEND + "    return [i"),
    }),
    "helper": (HELPER, {"brief": "a lighthouse"}, {
        "literal in payload": ('"shots": 2', '"shots": 3'),
        "computed payload": ('{"prompt": shot}', '{"prompt": shot.upper()}'),
        "statement outside": ('plan["shots"][0]', 'plan["shots"][-1]'),
        "insert non-call statement": ("    first = await", "    label = 'draft'\n"
                                      "    first = await"),
        "wrap in new block": ('    plan = await ctx.run("storyboard.plan", '
                              '{"brief": args["brief"], "shots": 2})',
                              '    if args:\n        plan = await ctx.run("storyboard.plan", '
                              '{"brief": args["brief"], "shots": 2})'),
        "delete a call": ('        return await ctx.run("image.generate", {"prompt": shot})',
                          "        return {\"artifact\": {\"id\": shot}}"),
        "append a new call": ("    return first", APPEND + "    return first"),
    }),
    "loop": (LOOP, {}, {
        "literal in payload": ('f"take {i}"', 'f"retake {i}"'),
        "computed payload": ('{"image": image["artifact"]}',
                             '{"image": image["artifact"]["id"]}'),
        "statement outside": ("kept.append(review[\"verdict\"])",
                              "kept.append(review[\"score\"])"),
        "insert non-call statement": ("        image = await", "        label = i * 2\n"
                                      "        image = await"),
        "wrap in new block": ('        review = await ctx.run("review.visual", '
                              '{"image": image["artifact"]})',
                              '        if image:\n            review = await ctx.run('
                              '"review.visual", {"image": image["artifact"]})'),
        "delete a call": ('        review = await ctx.run("review.visual", '
                          '{"image": image["artifact"]})', '        review = {"verdict": 1}'),
        "append a new call": ("    return kept", APPEND + "    return kept"),
    }),
}

EXPECTED = {
    "literal in payload": "call_changed",
    "computed payload": "call_changed",
    "statement outside": "accepted",
    "insert non-call statement": "accepted",
    "wrap in new block": "removed",
    "delete a call": "removed",
    "append a new call": "accepted",
}


@pytest.fixture
def sandbox_kind() -> str:
    return "process"


def _verdict(frozen, text: str, relocation: str) -> str:
    result = check_gate(frozen, assign_sites(ast.parse(text)), relocation=relocation)
    if result.accepted:
        return "accepted"
    kinds = {str(c.kind) for c in result.counterexamples}
    assert len(kinds) == 1, kinds
    return kinds.pop()


@pytest.mark.parametrize("relocation", ["stop", "remap"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gate_splits_edit_classes_like_table_vii(harness: Harness, name: str,
                                                     relocation: str) -> None:
    source, args, edits = CASES[name]
    committed = harness.pipeline.run(name, source, args, Envelope()).to_json()
    assert committed["status"] == "succeeded", committed["error"]
    frozen = frozen_sites(harness.services.store.list_slots(name))
    assert frozen, "every call of the script is committed"
    verdicts = {}
    for edit, (old, new) in edits.items():
        assert source.count(old) == 1, (name, edit)
        verdicts[edit] = _verdict(frozen, source.replace(old, new), relocation)
    expected = dict(EXPECTED)
    if relocation == "remap":
        expected["wrap in new block"] = "accepted"
    assert verdicts == expected

"""Lemma 1: what keeps a callsite σ and what changes it."""

from __future__ import annotations

import ast
import textwrap

from orchestrator.sites import assign_sites

BASE = '''
async def orchestrate(ctx, args):
    plan = await ctx.run("storyboard.plan", {"brief": args["brief"], "shots": 3})
    for i in range(3):
        img = await ctx.run("image.generate", {"prompt": plan["shots"][i]})
        if i == 2:
            await ctx.run("review.visual", {"image": img})
    return plan
'''


def sites_of(source: str) -> list[tuple[str, str]]:
    return [(s.site, s.capability) for s in assign_sites(ast.parse(textwrap.dedent(source)))]


def fingerprints(source: str) -> dict[str, str]:
    return {s.site: s.fingerprint for s in assign_sites(ast.parse(textwrap.dedent(source)))}


def test_base_sites() -> None:
    assert sites_of(BASE) == [
        ("orchestrate/#0", "storyboard.plan"),
        ("orchestrate/for0/#0", "image.generate"),
        ("orchestrate/for0/if0/#0", "review.visual"),
    ]


def test_formatting_and_comments_keep_sites_and_fingerprints() -> None:
    reformatted = '''
# a comment at the top

async def orchestrate(ctx, args):  # entry
    plan = await ctx.run(
        "storyboard.plan",
        {"brief": args["brief"],   "shots": 3},   # trailing comment
    )

    for i in range(3):
        img = await ctx.run("image.generate",
                            {"prompt": plan["shots"][i]})
        if i == 2:
            await ctx.run("review.visual", {"image": img})
    return plan
'''
    assert sites_of(reformatted) == sites_of(BASE)
    assert fingerprints(reformatted) == fingerprints(BASE)


def test_payload_value_keeps_site_but_changes_fingerprint() -> None:
    edited = BASE.replace('"shots": 3', '"shots": 4')
    assert sites_of(edited) == sites_of(BASE)
    assert fingerprints(edited)["orchestrate/#0"] != fingerprints(BASE)["orchestrate/#0"]
    assert fingerprints(edited)["orchestrate/for0/#0"] == fingerprints(BASE)["orchestrate/for0/#0"]


def test_call_free_statement_inserted_before_keeps_sites() -> None:
    inserted = BASE.replace("    for i in range(3):",
                            "    note = 'draft'\n    if note:\n        note = note + '!'\n"
                            "    for j in range(2):\n        note = note + str(j)\n"
                            "    for i in range(3):")
    assert sites_of(inserted) == sites_of(BASE)
    assert fingerprints(inserted) == fingerprints(BASE)


def test_append_keeps_existing_sites() -> None:
    appended = BASE.replace("    return plan",
                            '    await ctx.run("text.generate", {"prompt": "summary"})\n'
                            "    return plan")
    assert sites_of(appended)[:3] == sites_of(BASE)
    assert sites_of(appended)[3] == ("orchestrate/#1", "text.generate")


def test_wrapping_in_a_new_block_changes_the_site() -> None:
    wrapped = BASE.replace(
        '    plan = await ctx.run("storyboard.plan", {"brief": args["brief"], "shots": 3})',
        '    if args:\n'
        '        plan = await ctx.run("storyboard.plan", {"brief": args["brief"], "shots": 3})')
    assert "orchestrate/#0" not in dict(sites_of(wrapped))
    assert ("orchestrate/if0/#0", "storyboard.plan") in sites_of(wrapped)


def test_moving_into_a_helper_changes_the_site() -> None:
    moved = '''
async def plan_it(ctx, args):
    return await ctx.run("storyboard.plan", {"brief": args["brief"], "shots": 3})

async def orchestrate(ctx, args):
    plan = await plan_it(ctx, args)
    return plan
'''
    assert sites_of(moved) == [("plan_it/#0", "storyboard.plan")]


def test_nested_helpers_are_qualified_and_race_gets_a_site() -> None:
    source = '''
async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    fast = await ctx.race([gen("a"), gen("b")])
    return fast
'''
    assert sites_of(source) == [("orchestrate.gen/#0", "image.generate"),
                                ("orchestrate/#0", "ctx.race")]


def test_try_handlers_and_else_blocks_are_distinct() -> None:
    source = '''
async def orchestrate(ctx, args):
    try:
        a = await ctx.run("text.generate", {"prompt": "x"})
    except CapabilityError:
        a = await ctx.run("text.generate", {"prompt": "y"})
    if a:
        b = 1
    else:
        b = await ctx.run("text.generate", {"prompt": "z"})
    return b
'''
    assert [s for s, _ in sites_of(source)] == [
        "orchestrate/try0/#0", "orchestrate/except0.0/#0", "orchestrate/else1/#0"]

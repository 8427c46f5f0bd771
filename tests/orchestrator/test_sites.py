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
    assert sites_of(moved) == [("orchestrate/#0>plan_it/#0", "storyboard.plan")]


def test_nested_helpers_are_qualified_and_race_gets_a_site() -> None:
    source = '''
async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    fast = await ctx.race([gen("a"), gen("b")])
    return fast
'''
    assert sorted(sites_of(source)) == [
        ("orchestrate/#0", "ctx.race"),
        ("orchestrate/#1>orchestrate.gen/#0", "image.generate"),
        ("orchestrate/#2>orchestrate.gen/#0", "image.generate")]


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


def test_a_helper_called_from_two_places_has_two_sites_with_one_call_expression() -> None:
    source = """
async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    a = await gen("a")
    b = await gen("b")
    return [a, b]
"""
    sites = assign_sites(ast.parse(source))
    assert [s.site for s in sites] == ["orchestrate/#0>orchestrate.gen/#0",
                                       "orchestrate/#1>orchestrate.gen/#0"]
    assert sites[0].fingerprint == sites[1].fingerprint
    assert sites[0].chain_fingerprint != sites[1].chain_fingerprint
    assert [s.entry_line for s in sites] == [5, 6]


def test_same_named_definitions_in_different_blocks_get_distinct_sites() -> None:
    source = """
async def orchestrate(ctx, args):
    if args["fast"]:
        async def gen(s):
            return await ctx.run("image.generate", {"prompt": s, "size": "256x256"})
    else:
        async def gen(s):
            return await ctx.run("image.generate", {"prompt": s})
    return await gen("x")
"""
    sites = {s.site: s for s in assign_sites(ast.parse(source))}
    assert sorted(sites) == ["orchestrate/#0>orchestrate/else0.gen/#0",
                             "orchestrate/#0>orchestrate/if0.gen/#0"]
    assert sites["orchestrate/#0>orchestrate/if0.gen/#0"].line == 5
    assert sites["orchestrate/#0>orchestrate/else0.gen/#0"].line == 8


def test_a_call_free_helper_or_statement_inserted_before_keeps_every_site() -> None:
    before = """
async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    a = await gen("a")
    return a
"""
    after = """
async def orchestrate(ctx, args):
    async def tidy(s):
        return s.strip()
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    label = await tidy(" a ")
    if label:
        label = label.upper()
    a = await gen("a")
    return a
"""
    assert [s.site for s in assign_sites(ast.parse(before))] == [
        s.site for s in assign_sites(ast.parse(after))]


def test_each_site_is_bounded_by_the_loops_and_fanouts_on_its_chain() -> None:
    """The host admits at most this many calls at a site in one revision (issue 28.1)."""
    from orchestrator.annotate import annotate

    source = '''
async def orchestrate(ctx, args):
    async def gen(prompt):
        return await ctx.run("image.generate", {"prompt": prompt})

    async def twice(prompt):
        for k in range(2):
            await gen(prompt + str(k))

    once = await ctx.run("image.generate", {"prompt": "x"})
    shots = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
    for i in range(3):
        for j in ["a", "b"]:
            await twice(j)
    best = await ctx.race([gen("q"), gen("r")])
    return 1
'''
    bounds = {s.site: s.max_calls for s in annotate(source).sites}
    assert bounds == {
        "orchestrate/#0": 1,
        "orchestrate/#1>orchestrate.gen/#0": 8,
        "orchestrate/for0/for0/#0>orchestrate.twice/for0/#0>orchestrate.gen/#0": 12,
        "orchestrate/#2": 1,
        "orchestrate/#3>orchestrate.gen/#0": 1,
        "orchestrate/#4>orchestrate.gen/#0": 1,
    }


def test_a_site_bounds_the_calls_at_one_fanout_path_by_one_branch() -> None:
    """``Site.branch_calls``: how many calls at one fanout path, the calls one branch of
    the innermost fanout makes each time it runs (a comprehension's loop makes branches,
    not calls in one of them)."""
    from orchestrator.annotate import annotate

    source = '''
async def orchestrate(ctx, args):
    async def gen(prompt):
        return await ctx.run("image.generate", {"prompt": prompt})

    async def row(i):
        for k in range(2):
            await gen(str(k))

    once = await ctx.run("image.generate", {"prompt": "x"})
    shots = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
    rows = await ctx.parallel([row(i) for i in range(5)])
    for k in range(3):
        await ctx.parallel([gen(p) for p in args["prompts"][:4]])
    grid = await ctx.parallel([ctx.parallel([gen(f"{i}{j}") for j in range(3)])
                               for i in range(2)])
    tasks = [gen(p) for p in args["prompts"][:4]]
    await ctx.parallel(tasks)
    await ctx.parallel([ctx.run("text.generate", {"prompt": await gen(p)})
                        for p in args["prompts"][:4]])
    return 1
'''
    sites = annotate(source).sites
    assert {s.site: (s.max_calls, s.branch_calls) for s in sites} == {
        "orchestrate/#0": (1, 1),
        "orchestrate/#1>orchestrate.gen/#0": (8, 1),
        "orchestrate/#2>orchestrate.row/for0/#0>orchestrate.gen/#0": (10, 2),
        "orchestrate/for0/#0>orchestrate.gen/#0": (12, 3),
        "orchestrate/#3>orchestrate.gen/#0": (6, 1),
        # a list built in a variable keeps the site's call count
        "orchestrate/#4>orchestrate.gen/#0": (4, 4),
        # awaited inside the comprehension: in the task that builds the list
        "orchestrate/#6>orchestrate.gen/#0": (4, 4),
        "orchestrate/#5": (4, 1),
    }, sites


def test_a_site_without_a_static_bound_keeps_none() -> None:
    from orchestrator.annotate import annotate

    source = '''
async def orchestrate(ctx, args):
    async def stage(x):
        return await ctx.run("text.generate", {"prompt": x})

    async def run_all(stages):
        return await ctx.pipeline(stages, "x")

    while True:
        await ctx.run("image.generate", {"prompt": "w"})
        break
    for p in args["prompts"]:
        await ctx.run("image.generate", {"prompt": p})
    return await run_all([stage])
'''
    bounds = {s.site: s.max_calls for s in annotate(source).sites}
    assert set(bounds.values()) == {None}, bounds
    assert {s.branch_calls for s in annotate(source).sites} == {None}


def test_a_handed_over_helper_runs_once_per_stage_or_node() -> None:
    """A stage or dag node function named in place runs once each time its fanout runs."""
    from orchestrator.annotate import annotate

    source = '''
async def orchestrate(ctx, args):
    async def stage(x):
        return await ctx.run("text.generate", {"prompt": "s"})

    async def node(inputs):
        for i in range(3):
            await ctx.run("image.generate", {"prompt": str(i)})
        return 1

    for k in range(2):
        await ctx.pipeline([stage, stage], "x")
    return await ctx.dag({"a": (node, []), "b": (node, ["a"])})
'''
    bounds = {s.site: s.max_calls for s in annotate(source).sites}
    assert bounds == {"orchestrate.stage/#0": 4, "orchestrate.node/for0/#0": 6}, bounds


def test_a_site_longer_than_site_chars_is_refused_at_annotation() -> None:
    """A site's name must fit the host's limit on a frame's ``site`` (LIMITS site_chars):
    a chain of helper calls longer than that is refused before any sandbox starts."""
    import pytest

    from broker.errors import AnnotationError
    from orchestrator.annotate import annotate
    from sandbox.language import LIMITS

    levels = LIMITS["site_chars"] // len(">h000_helper_with_a_long_name/#0") + 2
    lines = []
    for i in range(levels):
        inner = (f"await h{i + 1:03}_helper_with_a_long_name(ctx)" if i + 1 < levels else
                 'await ctx.run("text.generate", {"prompt": "deep"})')
        lines += [f"async def h{i:03}_helper_with_a_long_name(ctx):", f"    return {inner}"]
    lines += ["async def orchestrate(ctx, args):",
              "    return await h000_helper_with_a_long_name(ctx)"]
    with pytest.raises(AnnotationError, match="site_chars"):
        annotate("\n".join(lines) + "\n")


def test_sites_travel_with_their_paths() -> None:
    """``Admission.to_wire``/``from_wire`` (the sandbox job) keep each site's shapes."""
    import json

    from orchestrator.admission import Admission
    from orchestrator.annotate import annotate
    from orchestrator.gate import GateResult

    source = '''
async def orchestrate(ctx, args):
    async def gen(p):
        return await ctx.run("image.generate", {"prompt": p})

    return await ctx.race([gen(p) for p in ["a", "b", "c"]])
'''
    annotated = annotate(source)
    admission = Admission(annotated.text, annotated.sites, GateResult(accepted=True))
    again = Admission.from_wire(json.loads(json.dumps(admission.to_wire())))
    assert again.sites == annotated.sites

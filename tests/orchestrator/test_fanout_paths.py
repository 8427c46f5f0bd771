"""Naming the fanout element a path refers to (pure: the script is never run)."""

from __future__ import annotations

import ast

from orchestrator.fanout_paths import describe_path, fanouts
from orchestrator.sites import assign_sites

ARGS = {"shots": ["a", "b", "c"], "styles": {"x": 1}}


def described(text: str, path: list[int], args: object = ARGS) -> str:
    site = assign_sites(ast.parse(text))[0]
    return describe_path(path, site.entry_line, fanouts(text, args))


def test_a_comprehension_over_args_through_a_variable() -> None:
    text = '''async def orchestrate(ctx, args):
    shots = args["shots"][:8]

    async def gen(shot):
        return await ctx.run("image.generate", {"prompt": shot})

    tasks = [gen(s) for s in shots]
    return await ctx.parallel(tasks)
'''
    assert described(text, [1]) == (
        'path [1]: element 1 of `shots` in the ctx.parallel at line 8, = "b"')


def test_constants_ranges_and_enumerate() -> None:
    text = '''SIZES = ["256x256", "512x512"]


async def orchestrate(ctx, args):
    async def gen(i, size):
        return await ctx.run("image.generate", {"prompt": "p", "size": size})

    return await ctx.parallel([gen(i, z) for i, z in enumerate(SIZES)])
'''
    assert described(text, [1]).endswith('= [1, "512x512"]')
    ranged = text.replace("enumerate(SIZES)", "enumerate(range(3))")
    assert described(ranged, [2]).endswith("= [2, 2]")


def test_literal_items_and_nested_paths() -> None:
    text = '''async def orchestrate(ctx, args):
    return await ctx.race([
        ctx.run("text.generate", {"prompt": "one"}),
        ctx.run("text.generate", {"prompt": "two"}),
    ])
'''
    second = next(s for s in assign_sites(ast.parse(text)) if s.line == 4)
    assert describe_path([1, 0], second.entry_line, fanouts(text, {})) == (
        "path [1, 0]: element 1 of the items written in the list in the ctx.race at line 2, "
        '= `ctx.run("text.generate", {"prompt": "two"})`; then branch 0 of the fanouts '
        "inside it")


def test_dag_nodes_in_the_order_written() -> None:
    text = '''async def orchestrate(ctx, args):
    async def plan(deps):
        return await ctx.run("text.generate", {"prompt": "plan"})

    return await ctx.dag({"plan": (plan, []), "draw": (plan, ["plan"])})
'''
    found = fanouts(text, {})
    assert [(f.kind, f.values) for f in found] == [("dag", ('"plan"', '"draw"'))]
    assert describe_path([1], 5, found).endswith('in the ctx.dag at line 5, = "draw"')


def test_unknown_values_and_bad_data_are_not_named() -> None:
    text = '''async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("text.generate", {"prompt": s})

    return await ctx.parallel([gen(s) for s in args["shots"]["x":2]])
'''
    assert described(text, [0]) == ('path [0]: element 0 of `args["shots"]["x":2]` in the '
                                    "ctx.parallel at line 5")
    assert described(text.replace('["x":2]', "[:2]"), [5]).endswith("at line 5")
    assert described(text.replace('["x":2]', "[:2]"), [0], args=None).endswith("at line 5")
    assert describe_path([], 1, []) == "path []: not inside any fanout"
    assert describe_path([3], None, []).startswith("path [3]: branch 3 of the outermost")
    assert fanouts("async def orchestrate(ctx, args):\n    return (", {}) == []

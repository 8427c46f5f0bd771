"""The fanout paths each site can be reached at (``orchestrator.checker.nesting`` along a
site's chain, ``Site.paths``): every path the runtime can give a call is one of its
shapes; where the analysis does not follow an awaitable, the site claims nothing."""

from __future__ import annotations

import textwrap

import pytest

from orchestrator.annotate import annotate
from orchestrator.site_paths import Branching as B
from orchestrator.site_paths import describe, fits


def paths(body: str, before: str = "") -> dict[str, object]:
    text = textwrap.dedent(before) + "async def orchestrate(ctx, args):\n" + textwrap.indent(
        textwrap.dedent(body), "    ")
    return {s.site: s.paths for s in annotate(text).sites}


GEN = '''
async def gen(ctx, s):
    return await ctx.run("image.generate", {"prompt": s})


'''


@pytest.mark.parametrize(("body", "site", "expected"), [
    ('return await ctx.run("text.generate", {"prompt": "a"})\n', "orchestrate/#0", ((),)),
    ('return await ctx.parallel([gen(ctx, s) for s in args["x"][:4]])\n',
     "orchestrate/#0>gen/#0", ((B(4),),)),
    ('return await ctx.parallel([gen(ctx, "a"), gen(ctx, "b"), gen(ctx, "c")])\n',
     "orchestrate/#1>gen/#0", ((B(3, None, 1),),)),
    # a list with a * item, or one put in a variable first: any index below the width
    ('return await ctx.parallel([*[gen(ctx, s) for s in args["x"][:2]], gen(ctx, "c")])\n',
     "orchestrate/#1>gen/#0", ((B(None),),)),
    ('tasks = [gen(ctx, "a"), gen(ctx, "b")]\nreturn await ctx.parallel(tasks)\n',
     "orchestrate/#1>gen/#0", ((B(2),),)),
    ('''tasks = []
for s in args["x"][:6]:
    tasks.append(gen(ctx, s))
return await ctx.parallel(tasks)
''', "orchestrate/for0/#0>gen/#0", ((B(6),),)),
    ('''tasks = [gen(ctx, s) for s in args["x"][:2]]
tasks += [gen(ctx, "extra")]
n = len(tasks)
return await ctx.parallel(tasks)
''', "orchestrate/#1>gen/#0", ((B(3),),)),
    ('c = gen(ctx, "a")\nreturn await c\n', "orchestrate/#0>gen/#0", ((),)),
    ('c = gen(ctx, "a")\nreturn await ctx.parallel([c, gen(ctx, "b")])\n',
     "orchestrate/#0>gen/#0", ((B(2, None, 0),),)),
    ('return await ctx.parallel([gen(ctx, "a") if args else gen(ctx, "b"), gen(ctx, "c")])\n',
     "orchestrate/#1>gen/#0", ((B(2, None, 0),),)),
    ('return await (gen(ctx, "a") if args else gen(ctx, "b"))\n', "orchestrate/#1>gen/#0",
     ((),)),
    ('''return await ctx.parallel([ctx.parallel([gen(ctx, f"{i}{j}") for j in range(3)])
                           for i in range(2)])
''', "orchestrate/#0>gen/#0", ((B(2), B(3)),)),
])
def test_shapes_follow_awaits_lists_and_names(body: str, site: str, expected: object) -> None:
    assert paths(body, GEN)[site] == expected


def test_a_helper_reached_inside_a_fanout_adds_its_own_fanouts() -> None:
    found = paths('return await ctx.parallel([row(ctx, i) for i in range(5)])\n', GEN + '''
async def row(ctx, i):
    first = await gen(ctx, "head")
    return await ctx.parallel([gen(ctx, f"{i}{j}") for j in range(7)])


''')
    assert found["orchestrate/#0>row/#0>gen/#0"] == ((B(5),),)
    assert found["orchestrate/#0>row/#1>gen/#0"] == ((B(5), B(7)),)


def test_race_branches_name_their_race() -> None:
    found = paths('return await ctx.race([gen(ctx, s) for s in ["a", "b"]])\n', GEN)
    assert found["orchestrate/#0"] == ((),)
    assert found["orchestrate/#1>gen/#0"] == ((B(2, "orchestrate/#0"),),)


def test_pipeline_stages_and_dag_nodes_run_one_level_down() -> None:
    found = paths('''async def plan(x):
    return await ctx.run("text.generate", {"prompt": "plan"})

async def draw(x):
    return await ctx.run("image.generate", {"prompt": "draw"})

first = await ctx.pipeline([plan, draw, plan], None)
return await ctx.parallel([ctx.dag({"a": (draw, []), "b": (draw, ["a"])})])
''')
    assert found["orchestrate.plan/#0"] == ((B(3),),)
    assert set(found["orchestrate.draw/#0"]) == {(B(3),), (B(1, None, 0), B(2))}


@pytest.mark.parametrize("body", [
    # handed to a function: it may put the coroutine anywhere
    'return await wrap(gen(ctx, "a"))\n',
    # read from a nested function, which may run in any task
    'c = gen(ctx, "a")\nasync def later():\n    return await c\nreturn await later()\n',
    # the list escapes (copied, iterated, aliased)
    'tasks = [gen(ctx, "a")]\nreturn await ctx.parallel(tasks.copy())\n',
    'tasks = [gen(ctx, "a")]\nfor t in tasks:\n    await t\nreturn 1\n',
    'tasks = [gen(ctx, "a")]\nother = tasks\nreturn await ctx.parallel(other)\n',
    # a list the caller may hold too
    'return await fill(ctx, [])\n',
])
def test_what_the_analysis_does_not_follow_claims_nothing(body: str) -> None:
    before = GEN + '''
async def wrap(c):
    return await c


async def fill(ctx, tasks):
    tasks.append(gen(ctx, "p"))
    return 1


'''
    found = paths(body, before)
    gens = [site for site in found if site.endswith(">gen/#0")]
    assert gens and all(found[site] is None for site in gens), found


def test_a_coroutine_never_awaited_is_reachable_nowhere() -> None:
    found = paths('c = gen(ctx, "a")\nreturn 1\n', GEN)
    assert found["orchestrate/#0>gen/#0"] == ()


def test_fits_and_describe() -> None:
    shape = (B(4), B(2, "orchestrate/#0"))

    def raced(site: str) -> frozenset[int]:
        return frozenset({5}) if site == "orchestrate/#0" else frozenset()

    assert fits(shape, [3, 1], raced) and fits(shape, [0, 5], raced)
    assert not fits(shape, [4, 0], raced) and not fits(shape, [0, 2], raced)
    assert not fits(shape, [0], raced) and not fits(shape, [0, 0, 0], raced)
    assert fits((B(None),), [999_999], raced)
    assert describe((shape, ())) == "[<4][<2] or []"


def test_a_literal_item_fits_its_own_index_only() -> None:
    """An item written in place runs at its own index; a replayed race's winner at the
    index committed for it."""
    def raced(site: str) -> frozenset[int]:
        return frozenset({3}) if site == "orchestrate/#0" else frozenset()

    assert fits((B(2, None, 1),), [1], raced)
    assert not fits((B(2, None, 1),), [0], raced)
    assert fits((B(2, "orchestrate/#0", 0),), [3], raced)
    assert not fits((B(2, "orchestrate/#0", 0),), [1], raced)
    assert describe(((B(4), B(2, None, 1)),)) == "[<4][1]"

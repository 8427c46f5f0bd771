"""The host's bounds per branch (a literal item's one index, the calls one branch makes at
a fanout path) never refuse an honest script: each shape they judge runs through the real
embedded path (checker, annotation, gate, process sandbox) and is replayed by a second
revision, whose calls are all committed."""

from __future__ import annotations

import textwrap

import pytest

from broker.envelope import Envelope, SandboxLimits


def _script(body: str, before: str = "") -> str:
    return (textwrap.dedent(before) + "async def orchestrate(ctx, args):\n"
            + textwrap.indent(textwrap.dedent(body), "    "))


_GEN = '''
async def gen(ctx, prompt):
    return await ctx.run("text.generate", {"prompt": prompt})


async def two(ctx, prompt):
    out = []
    for k in range(2):
        out.append(await ctx.run("text.generate", {"prompt": f"{prompt} {k}"}))
    return out


'''

SHAPES = {
    # literal items, a helper, a conditional item and a race of literal items
    "literal-items": (_script('''
        found = await ctx.parallel([ctx.run("text.generate", {"prompt": "a"}),
                                    gen(ctx, "b"),
                                    gen(ctx, "c") if args["x"] else gen(ctx, "d"),
                                    ctx.parallel([gen(ctx, "e"), gen(ctx, "f")])])
        won = await ctx.race([gen(ctx, "g")])
        return [len(found), won["text"]]
        ''', _GEN), 6),
    # a comprehension's branch makes two calls in a bounded loop, at one fanout path
    "branch-loop": (_script('''
        rows = await ctx.parallel([two(ctx, p) for p in args["prompts"][:3]])
        return len(rows)
        ''', _GEN), 6),
    # nested fanouts, and a fanout run twice in a loop (its paths are used twice)
    "nested": (_script('''
        grid = await ctx.parallel([ctx.parallel([gen(ctx, f"{i}{j}") for j in range(2)])
                                   for i in range(2)])
        for r in range(2):
            await ctx.parallel([gen(ctx, f"{r} {p}") for p in args["prompts"][:3]])
            await ctx.parallel([gen(ctx, f"{r} x"), two(ctx, f"{r} y")])
        return len(grid)
        ''', _GEN), 4 + 2 * (3 + 1 + 2)),
}


def _run(services, run_id: str, text: str) -> dict:
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=30))
    args = {"x": True, "prompts": ["p", "q", "r", "s"]}
    return services.pipeline().run(run_id, text, args, envelope).to_json()


@pytest.mark.parametrize("shape", SHAPES)
def test_an_honest_shape_runs_and_replays(process_services, shape: str) -> None:
    text, calls = SHAPES[shape]
    first = _run(process_services, shape, text)
    assert first["status"] == "succeeded", first["error"]
    assert first["calls"]["executed"] == calls
    again = _run(process_services, shape, text)
    assert again["status"] == "succeeded", again["error"]
    replayed = [i for i in again["identities"]
                if i["outcome"] == "replayed" and i["capability"] != "ctx.race"]
    assert again["calls"]["executed"] == 0 and len(replayed) == calls


def test_a_replayed_race_runs_its_winner_at_the_committed_index(process_services) -> None:
    """Revision 1's race won at index 0; revision 2 puts that call second in the race's
    literal list, and the runtime replays it at index 0, not at its own index 1."""
    first = _run(process_services, "race-index", _script('''
        won = await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
        return won["text"]
        '''))
    assert first["status"] == "succeeded", first["error"]
    second = _run(process_services, "race-index", _script('''
        won = await ctx.race([ctx.run("text.generate", {"prompt": "b"}),
                              ctx.run("text.generate", {"prompt": "a"})])
        return won["text"]
        '''))
    assert second["status"] == "succeeded", second["error"]
    assert second["calls"]["executed"] == 0
    assert [i["path"] for i in second["identities"] if i["capability"] != "ctx.race"] == [[0]]

"""A call stored aside is shown to the model at the fanout path it was made.

v1 fans out six shots (the fourth size is rejected). The repair's args swap the first
shot for the second one's and give the second a new prompt: the dog relocates to path
[0], and the new red dog, asked at path [1] where the dog was committed, is new work
that the host stores aside of the committed slot (``Identity.moved_aside``). The run
JSON names it by that storage identity, the one `revise reconcile` takes; the repair
prompt must describe it at fanout path [1], not as a "branch 1000002 of the fanouts
inside it" that no script has.
"""

from __future__ import annotations

from broker.envelope import Envelope
from broker.identity import MOVED_ASIDE
from orchestrator.repair_context import load_context
from orchestrator.repair_prompt import initial_messages

from .conftest import Harness
from .repairs.corpus import _s

V1 = _s('''
    SIZES = ["1024x1024", "1024x1024", "1024x1024", "999x999", "1024x1024", "1024x1024"]


    async def orchestrate(ctx, args):
        async def gen(i, shot):
            return await ctx.run("image.generate", {"prompt": shot, "size": SIZES[i]})

        images = await ctx.parallel([gen(i, s) for i, s in enumerate(args["shots"][:6])])
        return [img["artifact"]["id"] for img in images[:6]]
''')
V2 = V1.replace('"999x999"', '"1024x1024"')
# A later failure of the repaired script, so that the run can be repaired again.
V3 = V2.replace("images[:6]]\n", 'images[:6]] + [args["missing"]]\n')
ARGS = {"shots": ["a cat", "a dog", "a fox", "an owl", "a bee", "a cow"]}
SWAPPED = {"shots": ["a dog", "a red dog", "a fox", "an owl", "a bee", "a cow"]}


def _run(harness: Harness, script: str, args: dict) -> dict:
    return harness.pipeline.run("run-1", script, args, Envelope()).to_json()


def test_new_work_stored_aside_is_described_at_its_fanout_path(harness: Harness) -> None:
    first = _run(harness, V1, ARGS)
    assert first["status"] == "failed"
    repair = _run(harness, V2, SWAPPED)
    assert repair["status"] == "succeeded", repair["error"]
    assert repair["calls"]["executed"] == 2  # the red dog and the fixed owl
    paths = sorted(tuple(i["path"]) for i in repair["identities"])
    assert paths == [(0,), (1, MOVED_ASIDE + 2), (2,), (3,), (4,), (5,)], paths

    again = _run(harness, V3, SWAPPED)
    assert again["status"] == "failed"
    prompt = initial_messages(load_context(harness.services.store, "run-1"))[-1]["content"]
    assert f"branch {MOVED_ASIDE + 2}" not in prompt, \
        "the repair prompt describes a fanout branch no script has"

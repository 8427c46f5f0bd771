"""Two repairs of one run submitted at once (a job queue lets both be submitted).

v1 commits a caption and fails. v2 and v3 both add the same paid image, at two
different call sites. One revision of a run runs at a time: while v2 runs, v3 is
refused with a message that names the running revision and what to do; submitted
again after v2 finished, v3 is judged against what v2 committed and stops before it
pays anything. The image is paid once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import RunBusy

from ..conftest import Harness
from .corpus import _s

V1 = _s('''
    async def orchestrate(ctx, args):
        caption = await ctx.run("text.generate", {"prompt": "a caption"})
        raise RuntimeError("no hero image yet")
''')
V2 = _s('''
    async def orchestrate(ctx, args):
        caption = await ctx.run("text.generate", {"prompt": "a caption"})
        layout = await ctx.run("text.generate", {"prompt": "a slow layout"})
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        return hero["artifact"]["id"]
''')
V3 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        caption = await ctx.run("text.generate", {"prompt": "a caption"})
        hero = await gen("hero on a cliff")
        return hero["artifact"]["id"]
''')


def test_a_second_repair_submitted_while_one_runs_is_refused_and_pays_nothing(
        make_harness: Callable[..., Harness]) -> None:
    v3_done = threading.Event()

    def latency(capability: str, payload: dict[str, Any]) -> float:
        if payload.get("prompt") == "a slow layout":
            assert v3_done.wait(60), "v3 did not finish"
        return 0.0

    harness = make_harness(latency=latency)
    first = harness.pipeline.run("run-1", V1, {}, Envelope()).to_json()
    assert (first["status"], first["calls"]["succeeded"]) == ("failed", 1)

    reports: dict[str, dict[str, Any]] = {}

    def repair(name: str, script: str) -> None:
        pipeline = harness.services.pipeline()
        reports[name] = pipeline.run("run-1", script, {}, Envelope()).to_json()

    v2 = threading.Thread(target=repair, args=("v2", V2))
    v2.start()
    # v2 is in its sandbox, its slow layout call claimed and waiting, before v3 comes.
    for _ in range(600):
        if len(harness.services.store.list_attempts("run-1")) >= 2:
            break
        threading.Event().wait(0.05)
    with pytest.raises(RunBusy) as busy:
        repair("v3", V3)
    assert "revision 2 still running" in busy.value.message
    v3_done.set()
    v2.join(60)
    assert reports["v2"]["status"] == "succeeded", reports["v2"]["error"]
    repair("v3", V3)
    assert reports["v3"]["revision"] == 3
    assert reports["v3"]["status"] == "stopped"  # v2's layout is frozen now: v3 drops it
    images = [e for e in harness.provider_log()
              if e["capability"] == "image.generate" and e["outcome"] == "ok"]
    assert len(images) == 1

"""Two repairs of one run in flight at once (a job queue lets both be submitted).

v1 commits a caption and fails. v2 and v3 both add the same paid image, at two
different call sites. v2 is admitted first but reaches the image only after v3
has committed it (v2's provider call before it waits until v3 has finished).
The image was paid by v3 before v2 asks for it: v2 must replay it, or be told
it is a semantic repeat (denied under auto for a side-effecting capability);
it must never pay for it again without a word.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from broker.envelope import Envelope

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


def test_a_payload_committed_by_a_concurrent_later_revision_is_not_paid_again(
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
    # v2 is in its sandbox, its slow layout call claimed and waiting, before v3 is admitted.
    for _ in range(600):
        if len(harness.services.store.list_attempts("run-1")) >= 2:
            break
        threading.Event().wait(0.05)
    repair("v3", V3)
    v3_done.set()
    v2.join(60)
    assert reports["v3"]["status"] == "succeeded", reports["v3"]["error"]
    assert (reports["v2"]["revision"], reports["v3"]["revision"]) == (2, 3)

    images = [e for e in harness.provider_log()
              if e["capability"] == "image.generate" and e["outcome"] == "ok"]
    warned = [w for r in reports.values() for w in r["warnings"] if "semantic repeat" in w]
    denied = reports["v2"]["status"] == "stopped" and \
        reports["v2"]["error"]["type"] == "SemanticRepeatDenied"
    assert len(images) == 1 or warned or denied, (
        f"the hero image was paid {len(images)} times, silently: "
        f"{[e['identity'] for e in images]}")

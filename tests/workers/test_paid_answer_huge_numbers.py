"""A paid answer holding an integer too large for a float (310 to 4300 digits: Python
reads it as an int, ``float()`` and ``math.isfinite`` raise OverflowError), through the
queue. In an image answer's ``usage`` (informational: whatever else is there is left
out) or as a review's ``score`` (clamped to 0..1), the answer is readable and paid: it
must be committed, never turned into an unresolved attempt that "ended without an
answer" and blocks the run until an operator reconciles it."""

from __future__ import annotations

import json

import pytest

from broker.envelope import Envelope
from tests.fakes.openai_server import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    Reply,
    ok_chat,
    ok_image,
)
from tests.scenarios.repairs.corpus import _s
from tests.scenarios.test_provider_money import ONE

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

HUGE = "9" * 400  # an int to Python, too large for a float

REVIEW = _s('''
    async def orchestrate(ctx, args):
        review = await ctx.run("review.visual", {"image": "a fox on a cliff"})
        return review["verdict"]
''')


def _huge_usage(request, server) -> Reply:
    body = json.dumps({**ok_image()(request, server).body, "usage": {"total_tokens": 0}})
    return Reply(200, None, raw=body.replace('"total_tokens": 0',
                                             f'"total_tokens": {HUGE}').encode())


def _huge_score(request, server) -> Reply:
    return ok_chat('{"verdict": "pass", "score": ' + HUGE + ', "notes": "fine"}')(
        request, server)


@pytest.mark.parametrize(("path", "answer", "script", "result"), [
    (IMAGES, _huge_usage, ONE, None),
    (CHAT, _huge_score, REVIEW, "pass"),
], ids=["image usage", "review score"])
def test_a_paid_answer_with_an_integer_too_large_for_a_float_is_committed(
        make_stack, path, answer, script, result) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(path, answer)
        stack = make_stack()
        stack.env.update({"REVISE_PROVIDER": "http",
                          "REVISE_PROVIDER_BASE_URL": server.base_url,
                          "REVISE_PROVIDER_API_KEY": FAKE_API_KEY})
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        stack.worker("capabilities", concurrency=2)
        stack.wait_ready(120)
        report = stack.client.submit(script, {}, Envelope(), "huge").wait(120)
        assert report["status"] == "succeeded", report["error"]
        assert server.charged() == 1
        if result is not None:
            assert report["result"] == result
        again = stack.client.submit(script, {}, Envelope(), "huge").wait(120)
        assert again["status"] == "succeeded" and again["calls"]["replayed"] == 1
        assert server.charged() == 1

"""Money at a real provider through the queue (issue 24): the same rules as embedded,
with broker workers in their own processes and an HTTP provider on 127.0.0.1 that
charges, then answers 5xx, or answers what the adapter or the artifact store cannot
take as it came. Counted from the provider's charge ledger. A paid answer is never
turned into a call that "ended without an answer"."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus
from tests.fakes.openai_server import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    Reply,
    charge_then_error,
    ok_chat,
    ok_image,
)
from tests.scenarios.repairs.corpus import _s
from tests.scenarios.test_provider_money import ONE, RETRYING

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _stack(make_stack, server: FakeOpenAIServer, *, honours: bool = False,
           before: Callable[[Any], None] = lambda stack: None, **env: str):
    """A stack whose broker workers call ``server``; ``before(stack)`` runs before its
    workers start."""
    stack = make_stack()
    stack.env.update({"REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": server.base_url,
                      "REVISE_PROVIDER_API_KEY": FAKE_API_KEY,
                      "REVISE_PROVIDER_HONOURS_IDEMPOTENCY_KEY": str(honours).lower(), **env})
    before(stack)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=2)
    stack.wait_ready(120)
    return stack


def test_a_charged_5xx_through_the_queue_is_never_paid_twice(make_stack) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, charge_then_error(500))
        stack = _stack(make_stack, server, honours=False)
        first = stack.client.submit(RETRYING, {}, Envelope(), "money").wait(120)
        assert first["status"] == "stopped", first
        assert first["error"]["type"] == "SemanticRepeatDenied"
        repair = stack.client.submit(ONE, {}, Envelope(), "money").wait(120)
        assert repair["status"] == "stopped" and "revise reconcile" in \
            repair["error"]["message"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 1
        (attempt,) = stack.store.list_attempts("money")
        assert attempt.status is AttemptStatus.UNCERTAIN


def test_a_charged_5xx_through_the_queue_is_answered_under_its_key(make_stack) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(503))
        stack = _stack(make_stack, server, honours=True)
        report = stack.client.submit(ONE, {}, Envelope(), "money").wait(120)
        assert report["status"] == "succeeded", report["error"]
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(keys) == 2 and keys[0] == keys[1] and server.charged() == 1


def _paid_once_then_replayed(stack, server: FakeOpenAIServer, script: str, run_id: str,
                             fix: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The first submit commits the paid answer; after ``fix`` a second replays it."""
    report = stack.client.submit(script, {}, Envelope(), run_id).wait(120)
    assert server.charged() == 1
    assert "ended without an answer" not in str(report["error"]), report["error"]
    assert report["status"] == "succeeded", report["error"]
    fix()
    again = stack.client.submit(script, {}, Envelope(), run_id).wait(120)
    assert again["status"] == "succeeded", again["error"]
    assert again["calls"]["replayed"] == 1 and server.charged() == 1
    return report


def test_a_paid_image_the_file_store_cannot_take_is_kept_not_lost(make_stack) -> None:
    """Its directory a file (or read-only, or its disk full): the bytes wait in the
    artifact spool, as for a database or S3 store that does not answer."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        def block(stack) -> None:
            stack.artifacts = stack.tmp_path / "home" / "artifacts"
            stack.artifacts.parent.mkdir(parents=True, exist_ok=True)
            stack.artifacts.write_text("a file where the artifact directory should be")

        stack = _stack(make_stack, server, before=block, REVISE_ARTIFACT_STORE="file")
        _paid_once_then_replayed(stack, server, ONE, "paid", fix=stack.artifacts.unlink)


def test_a_paid_image_s3_refuses_is_kept_not_lost(make_stack, s3_env) -> None:
    """The bucket deleted mid-run (or the credentials revoked): S3 answers, and refuses
    the put; the bytes wait in the spool until it is back."""
    s3 = boto3.client("s3", endpoint_url=s3_env["REVISE_S3_ENDPOINT_URL"],
                      region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    bucket = s3_env["REVISE_S3_BUCKET"]
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        stack = _stack(make_stack, server, REVISE_ARTIFACT_STORE="s3", **s3_env)
        s3.delete_bucket(Bucket=bucket)
        _paid_once_then_replayed(stack, server, ONE, "s3",
                                 fix=lambda: s3.create_bucket(Bucket=bucket))


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
    """``float()`` and ``math.isfinite`` raise OverflowError on it: usage leaves it out,
    a review's score is clamped to 0..1."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(path, answer)
        stack = _stack(make_stack, server)
        report = _paid_once_then_replayed(stack, server, script, "huge")
        if result is not None:
            assert report["result"] == result


PAGE = b"<!doctype html><html><body><h1>Sign in to continue</h1></body></html>"


def test_an_image_address_answering_an_html_page_is_not_committed_as_the_image(
        make_stack) -> None:
    """A CDN's or a portal's page with 200 is not the paid picture (a repair would replay
    it forever): paid and unusable, as an address answering 404 is."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        where = "/v1/files/hero.png"
        server.queue(IMAGES, lambda request, fake: Reply(200, {
            "created": 0, "data": [{"url": fake.base_url.removesuffix("/v1") + where}]}))
        server.queue(where, lambda request, fake: Reply(
            200, None, headers={"Content-Type": "text/html; charset=utf-8"}, raw=PAGE))
        stack = _stack(make_stack, server)
        report = stack.client.submit(ONE, {}, Envelope(), "page").wait(120)
        assert server.charged() == 1 and len(server.requests_to(where)) == 1
        slots = [(slot.result["artifact"], slot.result["width"], slot.result["height"])
                 for slot in stack.store.list_slots("page")]
        assert report["status"] != "succeeded", (report["result"], slots)
        (attempt,) = stack.store.list_attempts("page")
        assert attempt.status is AttemptStatus.UNCERTAIN
        assert "/v1/files/hero.png" in report["error"]["message"]

"""A paid image answered by address, where the address answers 200 with an HTML page
(a CDN's or a login portal's error page) instead of the picture, through the queue. The
provider charged, but what came back is not the image: it must not be committed as the
call's image (a repair would replay that page forever as the paid picture), but kept
as a paid, unusable answer, as an address that answers 404 is."""

from __future__ import annotations

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus
from tests.fakes.openai_server import FAKE_API_KEY, IMAGES, FakeOpenAIServer, Reply
from tests.scenarios.test_provider_money import ONE

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

PAGE = b"<!doctype html><html><body><h1>Sign in to continue</h1></body></html>"


def test_an_image_address_answering_an_html_page_is_not_committed_as_the_image(
        make_stack) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        where = "/v1/files/hero.png"
        server.queue(IMAGES, lambda request, fake: Reply(200, {
            "created": 0, "data": [{"url": fake.base_url.removesuffix("/v1") + where}]}))
        server.queue(where, lambda request, fake: Reply(
            200, None, headers={"Content-Type": "text/html; charset=utf-8"}, raw=PAGE))
        stack = make_stack()
        stack.env.update({"REVISE_PROVIDER": "http",
                          "REVISE_PROVIDER_BASE_URL": server.base_url,
                          "REVISE_PROVIDER_API_KEY": FAKE_API_KEY})
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        stack.worker("capabilities", concurrency=2)
        stack.wait_ready(120)
        report = stack.client.submit(ONE, {}, Envelope(), "page").wait(120)
        assert server.charged() == 1 and len(server.requests_to(where)) == 1
        slots = [(slot.result["artifact"], slot.result["width"], slot.result["height"])
                 for slot in stack.store.list_slots("page")]
        # The HTML page is not the paid picture: nothing committed, the attempt is paid
        # (uncertain) and the error names the address to fetch the image from.
        assert report["status"] != "succeeded", (report["result"], slots)
        (attempt,) = stack.store.list_attempts("page")
        assert attempt.status is AttemptStatus.UNCERTAIN
        assert "/v1/files/hero.png" in report["error"]["message"]

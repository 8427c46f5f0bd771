"""Money at a real provider through the queue (issue 24): the same rules as embedded,
with broker workers in their own processes and an HTTP provider on 127.0.0.1 that
charges, then answers 5xx. Counted from the provider's charge ledger."""

from __future__ import annotations

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus
from tests.fakes.openai_server import FAKE_API_KEY, IMAGES, FakeOpenAIServer, charge_then_error
from tests.scenarios.test_provider_money import ONE, RETRYING

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _stack(make_stack, server: FakeOpenAIServer, *, honours: bool):
    stack = make_stack()
    stack.env.update({"REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": server.base_url,
                      "REVISE_PROVIDER_API_KEY": FAKE_API_KEY,
                      "REVISE_PROVIDER_HONOURS_IDEMPOTENCY_KEY": str(honours).lower()})
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

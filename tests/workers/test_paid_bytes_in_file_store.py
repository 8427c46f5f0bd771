"""A paid answer whose bytes the FILE artifact store cannot take (its directory is a
file, read-only, or its disk is full) through the queue: the provider answered 200 and
charged, so the bytes are in hand. They must be kept (as they are for the database and
S3 stores, ``broker.artifact_spool``) and the result committed, never thrown away with
an error that says the provider "ended without an answer"."""

from __future__ import annotations

import pytest

from broker.envelope import Envelope
from tests.fakes.openai_server import FAKE_API_KEY, FakeOpenAIServer
from tests.scenarios.test_provider_money import ONE

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_paid_image_the_file_store_cannot_take_is_kept_not_lost(make_stack) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        stack = make_stack()
        stack.env.update({"REVISE_PROVIDER": "http",
                          "REVISE_PROVIDER_BASE_URL": server.base_url,
                          "REVISE_PROVIDER_API_KEY": FAKE_API_KEY,
                          "REVISE_ARTIFACT_STORE": "file"})
        artifacts = stack.tmp_path / "home" / "artifacts"
        artifacts.parent.mkdir(parents=True, exist_ok=True)
        artifacts.write_text("a file where the artifact directory should be")
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        stack.worker("capabilities", concurrency=2)
        stack.wait_ready(120)
        report = stack.client.submit(ONE, {}, Envelope(), "paid").wait(120)
        assert server.charged() == 1
        # The provider answered with the image and charged for it: that answer is the
        # attempt's result, not "a call that ended without an answer".
        assert "ended without an answer" not in str(report["error"]), report["error"]
        assert report["status"] == "succeeded", report["error"]
        artifacts.unlink()  # the operator frees the directory: a repair replays, unpaid
        again = stack.client.submit(ONE, {}, Envelope(), "paid").wait(120)
        assert again["status"] == "succeeded", again["error"]
        assert again["calls"]["replayed"] == 1 and server.charged() == 1

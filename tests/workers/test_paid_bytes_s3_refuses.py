"""A paid image whose bytes the S3 artifact store refuses (its bucket deleted or its
credentials revoked mid-run: NoSuchBucket, AccessDenied), through the queue. The
provider answered 200 and charged; the bytes are in hand. They must wait in the artifact
spool, as they do when S3 does not answer at all, and the result be committed: never
thrown away with an unresolved attempt that says the call "ended without an answer"."""

from __future__ import annotations

import boto3
import pytest

from broker.envelope import Envelope
from tests.fakes.openai_server import FAKE_API_KEY, FakeOpenAIServer
from tests.scenarios.test_provider_money import ONE

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_paid_image_s3_refuses_is_kept_not_lost(make_stack, s3_env) -> None:
    s3 = boto3.client("s3", endpoint_url=s3_env["REVISE_S3_ENDPOINT_URL"],
                      region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    bucket = s3_env["REVISE_S3_BUCKET"]
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        stack = make_stack()
        stack.env.update(s3_env, REVISE_ARTIFACT_STORE="s3", REVISE_PROVIDER="http",
                         REVISE_PROVIDER_BASE_URL=server.base_url,
                         REVISE_PROVIDER_API_KEY=FAKE_API_KEY)
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        stack.worker("capabilities", concurrency=2)
        stack.wait_ready(120)
        s3.delete_bucket(Bucket=bucket)  # gone mid-run: S3 answers, and refuses the put
        report = stack.client.submit(ONE, {}, Envelope(), "s3").wait(120)
        assert server.charged() == 1
        assert "ended without an answer" not in str(report["error"]), report["error"]
        assert report["status"] == "succeeded", report["error"]
        s3.create_bucket(Bucket=bucket)  # the operator puts it back: a repair is free
        again = stack.client.submit(ONE, {}, Envelope(), "s3").wait(120)
        assert again["status"] == "succeeded", again["error"]
        assert again["calls"]["replayed"] == 1 and server.charged() == 1

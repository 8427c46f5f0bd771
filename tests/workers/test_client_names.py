"""The queue client refuses a bad job before sending it: nothing reaches the queue."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import redis

from broker.envelope import Envelope
from broker.errors import InputError
from broker.settings import Settings
from workers.client import Client
from workers.config import WorkerSettings
from workers.messages import InvalidMessage

pytestmark = [pytest.mark.redis]

SCRIPT = "async def orchestrate(ctx, args):\n    return 1\n"


@pytest.fixture
def client(tmp_path: Path, redis_url: str):
    queue = WorkerSettings(queue_prefix=f"t{uuid.uuid4().hex[:10]}-")
    opened = Client(Settings(home=tmp_path / "home", redis_url=redis_url), queue=queue)
    yield opened
    opened.close()


def _queued(client: Client, redis_url: str) -> int:
    conn = redis.Redis.from_url(redis_url)
    try:
        return conn.llen(client.app.routing.queue("dispatch"))
    finally:
        conn.close()


@pytest.mark.parametrize("run_id", ["../../x", "a/b", "", ".", "..", "x" * 200, "a\x00b"])
def test_bad_run_ids_are_refused_before_sending(client, redis_url, run_id: str) -> None:
    with pytest.raises(InputError, match=r"^run id .* is not allowed"):
        client.submit(SCRIPT, {}, Envelope(), run_id)
    assert _queued(client, redis_url) == 0


def test_bad_script_text_and_args_are_refused_before_sending(client, redis_url) -> None:
    with pytest.raises(InputError, match="the script is not valid UTF-8 text: it has a lone "
                                         "surrogate '\\\\ud800' at character 2"):
        client.submit("# \ud800\n" + SCRIPT, {}, Envelope(), "r1")
    with pytest.raises(InvalidMessage, match=re.escape("args.dict.shots: input was not a "
                                                      "valid JSON value")):
        client.submit(SCRIPT, {"shots": {1, 2}}, Envelope(), "r1")
    with pytest.raises(InvalidMessage, match="args: a string in the args is not valid UTF-8"):
        client.submit(SCRIPT, {"shot": "\udc80"}, Envelope(), "r1")
    assert _queued(client, redis_url) == 0


def test_a_valid_job_is_queued(client, redis_url) -> None:
    handle = client.submit(SCRIPT.encode(), {"shots": ["a"]}, None, "shots-2024.1")
    assert handle.run_id == "shots-2024.1"
    assert _queued(client, redis_url) == 1

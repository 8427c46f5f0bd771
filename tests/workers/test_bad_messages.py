"""Malformed messages put straight on the queues of a real Celery stack.

Each gets a clear ``InvalidMessage`` answer carrying pydantic's description, and
the same worker processes then serve a valid job to success.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from broker.envelope import Envelope
from workers.client import JobHandle
from workers.messages import InvalidMessage
from workers.outcome import answer_of
from workers.routing import CAPABILITY_TASK, DISPATCH_TASK, SANDBOX_TASK

from .conftest import script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

ENVELOPE = Envelope().model_dump(mode="json")


def _job(**changes: Any) -> dict[str, Any]:
    return {"job_id": uuid.uuid4().hex, "run_id": "bad-msg", "script": script("e3_v2"),
            "args": {}, "envelope": ENVELOPE} | changes


def _no_envelope() -> dict[str, Any]:
    job = _job()
    del job["envelope"]
    return job


MALFORMED_JOBS = {
    "lone surrogate": (_job(script="async def orchestrate(ctx, args):\n    return '\ud800'\n"),
                       "script: the script is not valid UTF-8 text: it has a lone surrogate"),
    "no envelope": (_no_envelope(), "envelope: Field required"),
    "unknown envelope field": (_job(envelope=ENVELOPE | {"grant_everything": True}),
                               "envelope.grant_everything: Extra inputs are not permitted"),
    "not a dict": (["bad-msg", "print(1)"], "dispatch job: Input should be a valid "
                                            "dictionary"),
    "run id escapes": (_job(run_id="../../x"), "run_id: run id '../../x' is not allowed"),
}


def test_malformed_messages_get_clear_errors_and_the_workers_keep_serving(
        make_stack, tmp_path) -> None:
    stack = make_stack()
    dispatcher = stack.worker("dispatch", concurrency=1)
    sandbox = stack.worker("sandbox", concurrency=1)
    broker = stack.worker("capabilities", concurrency=1)
    stack.wait_ready()
    app, routing = stack.client.app, stack.client.app.routing
    workers = set()

    # -- the dispatch queue ----------------------------------------------------------------
    for name, (job, expected) in MALFORMED_JOBS.items():
        sent = app.send_task(DISPATCH_TASK, args=[job], queue=routing.queue("dispatch"))
        sent.get(timeout=30, propagate=False)
        assert sent.failed(), name  # Flower shows a refused job as FAILURE ...
        answer = answer_of(sent.result)  # ... that carries the answer
        assert answer is not None, (name, sent.result)
        assert "InvalidMessage" in repr(sent.result)
        workers.add(sent.worker)
        assert set(answer) == {"job_id", "run_id", "accepted", "revision", "report", "error"}
        assert answer["accepted"] is False and answer["revision"] is None, name
        error = answer["error"]
        assert error["type"] == "InvalidMessage" and error["identity"] is None, name
        assert error["message"].startswith("invalid dispatch job, refused before anything "
                                           "ran: "), name
        assert expected in error["message"], (name, error["message"])
        # The queue client shows that message (the error itself), never a class repr.
        handle = JobHandle(stack.client, sent.id, "bad-msg")
        assert handle.status() == "stopped"
        with pytest.raises(InvalidMessage) as caught:
            handle.result()
        assert caught.value.message == error["message"]
    assert stack.store.list_runs() == []
    assert not (tmp_path / "x").exists() and not (tmp_path / "home" / "x").exists()

    # -- the sandbox and capability queues -------------------------------------------------
    sent = app.send_task(SANDBOX_TASK, args=[{
        "job_id": "j1", "run_id": "bad-msg", "revision": 1, "source": "x = '\udfff'",
        "admission": {"text": "x", "sites": []},
        "args_text": "{}", "envelope": ENVELOPE | {"ledger_policy": "whatever"}}],
        queue=routing.queue("sandbox"))
    sent.get(timeout=30, propagate=False)
    answer = answer_of(sent.result)
    assert sent.failed() and answer is not None
    assert answer["status"] == "failed" and answer["error"]["type"] == "InvalidMessage"
    assert "source: the script is not valid UTF-8 text" in answer["error"]["message"]
    assert "envelope.ledger_policy: Input should be" in answer["error"]["message"]

    calls = {"run_id": "bad-msg", "revision": 1, "attempts": [1]}
    bad_calls = {  # each dropped before the store or the provider is touched
        "run id escapes": calls | {"run_id": "../x"},
        "an attempt twice": calls | {"attempts": [1, 1]},
        "no attempts": calls | {"attempts": []},
        "a foreign doorbell": calls | {"doorbell": "another-app:channel"},
        "the old wire form": [[{"run_id": "bad-msg"}], ENVELOPE],
    }
    for wave in bad_calls.values():
        app.send_task(CAPABILITY_TASK, args=[wave], queue=routing.queue("capabilities"))
    broker_log = stack.tmp_path / "capabilities0.log"
    deadline = time.monotonic() + 30
    while broker_log.read_text().count("dropped: invalid capability call") < len(bad_calls):
        assert time.monotonic() < deadline, broker_log.read_text()[-3000:]
        time.sleep(0.2)
    assert stack.provider_log() == []

    # -- then a valid job, served by the same three processes ------------------------------
    report = stack.client.submit(script("e3_v2"), {}, Envelope(), "good-run").wait(120)
    assert report["status"] == "succeeded", report
    assert report["calls"]["executed"] >= 1
    assert [p.poll() for p in (dispatcher, sandbox, broker)] == [None, None, None]
    assert workers == {stack.names[0]}  # one dispatcher answered every malformed job


def test_a_task_the_dispatcher_cannot_even_call_reads_as_a_message(make_stack) -> None:
    stack = make_stack()
    stack.worker("dispatch", concurrency=1)
    stack.wait_ready()
    sent = stack.client.app.send_task(DISPATCH_TASK, args=[],
                                      queue=stack.client.app.routing.queue("dispatch"))
    sent.get(timeout=30, propagate=False)
    with pytest.raises(Exception) as caught:
        JobHandle(stack.client, sent.id, "r").status()
    message = str(caught.value)
    assert "TypeError: " in message and "missing 1 required positional argument" in message
    assert "<class" not in message

"""The fake provider's money model, over real HTTP on 127.0.0.1 (httpx as the client)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.fakes.openai_server import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    body_digest,
    charge_then_error,
    complete_late,
    error,
    html_page,
    rate_limited,
    reject,
    slow,
)


def image(prompt: str = "fox") -> dict[str, Any]:
    return {"model": "gpt-image-1", "prompt": prompt, "size": "256x256"}


def post(server: FakeOpenAIServer, body: dict[str, Any], key: str | None = None, *,
         path: str = IMAGES, timeout: float = 5.0) -> httpx.Response:
    headers = {"Authorization": f"Bearer {FAKE_API_KEY}"}
    if key is not None:
        headers["Idempotency-Key"] = key
    url = server.base_url + path.removeprefix("/v1")
    return httpx.post(url, json=body, headers=headers, timeout=timeout)


def lookup(server: FakeOpenAIServer, key: str, api_key: str = FAKE_API_KEY) -> httpx.Response:
    return httpx.get(f"{server.base_url}/requests/{key}",
                     headers={"Authorization": f"Bearer {api_key}"}, timeout=5.0)


def wait_until(check: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@pytest.fixture(params=["honour", "ignore"])
def any_mode(request: pytest.FixtureRequest) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency=request.param) as server:
        yield server


@pytest.fixture
def honour() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        yield server


@pytest.fixture
def ignore() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:  # the default mode
        yield server


# ---- the charge ledger ---------------------------------------------------------------------------

def test_a_200_answer_is_one_charge_with_its_key_path_digest_and_time(any_mode) -> None:
    before = time.time()
    assert post(any_mode, image("fox"), "k-1").status_code == 200
    chat = {"model": "m", "messages": [{"role": "system", "content": "be brief"},
                                       {"role": "user", "content": "hello"}]}
    assert post(any_mode, chat, path=CHAT).status_code == 200
    first, second = any_mode.charges
    assert (first.key, first.path, first.digest, first.prompt) == (
        "k-1", IMAGES, body_digest(image("fox")), "fox")
    assert before <= first.time <= second.time <= time.time()
    assert (second.key, second.path, second.prompt) == (None, CHAT, "hello")
    assert (any_mode.charged(), any_mode.charged("fox"), any_mode.charged("hello"),
            any_mode.charged("wolf")) == (2, 1, 1, 0)


def test_failures_before_the_work_are_free(any_mode) -> None:
    any_mode.queue(IMAGES, error(500), reject(400), reject(403, "not allowed"),
                   rate_limited(2), html_page())
    statuses = [post(any_mode, image(), f"k-{i}").status_code for i in range(5)]
    assert statuses == [500, 400, 403, 429, 200]
    bad = post(any_mode, {**image(), "size": "999x999"})  # the default validation: free too
    assert bad.status_code == 400
    unauthorized = httpx.post(any_mode.base_url + "/images/generations", json=image(),
                              headers={"Authorization": "Bearer wrong"}, timeout=5)
    assert unauthorized.status_code == 401
    assert any_mode.charges == [] and any_mode.charged() == 0


def test_rate_limited_sends_retry_after_and_an_openai_error(any_mode) -> None:
    any_mode.queue(IMAGES, rate_limited(retry_after=3))
    answer = post(any_mode, image())
    assert answer.status_code == 429 and answer.headers["retry-after"] == "3"
    assert answer.json()["error"]["type"] == "rate_limit_error"
    assert post(any_mode, image()).status_code == 200  # one-shot: the next one works
    assert any_mode.charged() == 1


def test_reject_answers_the_status_and_message_given(any_mode) -> None:
    any_mode.queue(IMAGES, reject(), reject(422, "prompt was flagged"))
    first, second = post(any_mode, image()), post(any_mode, image())
    assert (first.status_code, second.status_code) == (400, 422)
    assert second.json()["error"]["message"] == "prompt was flagged"
    assert any_mode.charged() == 0


# ---- key modes -----------------------------------------------------------------------------------

def test_ignore_does_and_charges_every_request_again(ignore) -> None:
    answers = [post(ignore, image("fox"), "same-key") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert "idempotent-replayed" not in answers[1].headers
    assert ignore.charged("fox") == 3
    assert post(ignore, image("wolf"), "same-key").status_code == 200  # another body: no 422
    assert ignore.charged() == 4


def test_honour_answers_a_completed_key_from_its_store_free(honour) -> None:
    first = post(honour, image("fox"), "k")
    again = post(honour, {"size": "256x256", "prompt": "fox", "model": "gpt-image-1"}, "k")
    assert again.status_code == 200 and again.json() == first.json()  # key order is no matter
    assert again.headers["idempotent-replayed"] == "true"
    assert honour.charged() == 1 and len(honour.requests_to(IMAGES)) == 2
    assert post(honour, image("fox"), "other-key").status_code == 200  # a new key is new work
    assert post(honour, image("fox")).status_code == 200  # so is a request without a key
    assert honour.charged("fox") == 3


def test_honour_refuses_a_key_reused_with_another_body(honour) -> None:
    first = post(honour, image("fox"), "k")
    reused = post(honour, image("wolf"), "k")
    assert reused.status_code == 422
    err = reused.json()["error"]
    assert "already used with another request" in err["message"] and "'k'" in err["message"]
    assert err["code"] == "idempotency_key_reused"
    assert honour.charged() == 1 and honour.charged("wolf") == 0
    assert post(honour, image("fox"), "k").json() == first.json()  # the stored one is intact


def test_honour_answers_409_while_the_first_request_of_a_key_runs(honour) -> None:
    honour.queue(IMAGES, slow(1.0))
    answers: list[httpx.Response] = []
    first = threading.Thread(target=lambda: answers.append(post(honour, image(), "k")))
    first.start()
    wait_until(lambda: honour.in_flight == 1, "the first request in flight")
    conflict = post(honour, image(), "k")
    assert conflict.status_code == 409
    assert conflict.json()["error"]["code"] == "idempotency_key_in_progress"
    assert lookup(honour, "k").json() == {"status": "in_progress"}
    assert honour.charged() == 0  # the slow work has not completed yet
    first.join(10)
    assert [a.status_code for a in answers] == [200]
    assert honour.charged() == 1
    replay = post(honour, image(), "k")
    assert replay.json() == answers[0].json() and honour.charged() == 1


def test_a_replay_leaves_the_queued_behaviours_for_new_work(honour) -> None:
    post(honour, image(), "k")
    honour.queue(IMAGES, reject(400))
    assert post(honour, image(), "k").status_code == 200  # from the store: nothing ran
    assert post(honour, image(), "new").status_code == 400  # the rejection is still queued


def test_a_free_failure_frees_the_key(honour) -> None:
    honour.queue(IMAGES, rate_limited(), reject(400), error(503))
    assert [post(honour, image(), "k").status_code for _ in range(4)] == [429, 400, 503, 200]
    assert honour.charged() == 1
    assert lookup(honour, "k").json()["status"] == "completed"


def test_the_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="'honour' or 'ignore'"):
        FakeOpenAIServer(idempotency="honor")  # type: ignore[arg-type]


# ---- charged failures and late answers -----------------------------------------------------------

def test_charge_then_error_is_paid_and_honour_returns_the_work_on_retry(honour) -> None:
    honour.queue(IMAGES, charge_then_error())
    failed = post(honour, image("fox"), "k")
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    assert honour.charged("fox") == 1
    retry = post(honour, image("fox"), "k")
    assert retry.status_code == 200 and retry.json()["data"][0]["b64_json"]
    assert honour.charged("fox") == 1  # the retry under the same key did not pay again
    assert lookup(honour, "k").json() == {"status": "completed", "response": retry.json()}


def test_charge_then_error_under_ignore_pays_again_on_retry(ignore) -> None:
    ignore.queue(IMAGES, charge_then_error(502))
    assert post(ignore, image("fox"), "k").status_code == 502
    assert post(ignore, image("fox"), "k").status_code == 200
    assert ignore.charged("fox") == 2


def test_charge_then_error_of_a_request_the_work_refuses_is_that_refusal_free(any_mode) -> None:
    any_mode.queue(IMAGES, charge_then_error())
    assert post(any_mode, {**image(), "size": "1x1"}).status_code == 400
    assert any_mode.charged() == 0


def test_complete_late_times_the_client_out_on_a_paid_call(any_mode) -> None:
    any_mode.queue(IMAGES, complete_late(1.5))
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        post(any_mode, image("fox"), "k", timeout=0.3)
    assert time.monotonic() - started < 1.2
    assert any_mode.charged("fox") == 1  # done and billed although nobody got the answer
    retry = post(any_mode, image("fox"), "k")
    assert retry.status_code == 200
    paid = 1 if any_mode.idempotency == "honour" else 2
    assert any_mode.charged("fox") == paid
    assert (retry.headers.get("idempotent-replayed") == "true") is (paid == 1)


def test_complete_late_answers_a_patient_client(any_mode) -> None:
    any_mode.queue(IMAGES, complete_late(0.4))
    started = time.monotonic()
    assert post(any_mode, image(), timeout=5).status_code == 200
    assert time.monotonic() - started >= 0.4
    assert any_mode.charged() == 1


def test_slow_work_is_charged_when_it_completes_even_if_the_client_left(any_mode) -> None:
    any_mode.queue(IMAGES, slow(0.8))
    with pytest.raises(httpx.ReadTimeout):
        post(any_mode, image(), "k", timeout=0.2)
    assert any_mode.charged() == 0
    wait_until(lambda: any_mode.charged() == 1, "the slow work to complete")


def test_work_dropped_by_a_stopping_server_is_not_charged() -> None:
    server = FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour").start()
    server.queue(IMAGES, slow(5.0))
    errors: list[Exception] = []

    def call() -> None:
        try:
            post(server, image(), "k")
        except httpx.HTTPError as exc:
            errors.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: server.in_flight == 1, "the request in flight")
    server.stop()
    caller.join(10)
    assert len(errors) == 1 and server.charges == []
    wait_until(lambda: server.in_flight == 0, "the handler to leave")
    assert server._keys == {}  # the key of the dropped request is free again


# ---- concurrency ---------------------------------------------------------------------------------

def test_peak_concurrency_counts_requests_in_flight_at_once(any_mode) -> None:
    assert post(any_mode, image("one")).status_code == 200
    wait_until(lambda: any_mode.in_flight == 0, "the first request to end")
    assert any_mode.peak_concurrency == 1
    any_mode.queue(IMAGES, *[slow(0.5) for _ in range(4)])
    callers = [threading.Thread(target=post, args=(any_mode, image(f"p{i}"))) for i in range(4)]
    for caller in callers:
        caller.start()
    wait_until(lambda: any_mode.in_flight == 4, "four requests in flight")
    for caller in callers:
        caller.join(10)
    wait_until(lambda: any_mode.in_flight == 0, "every request to end")
    assert any_mode.peak_concurrency == 4 and any_mode.charged() == 5


# ---- lookup --------------------------------------------------------------------------------------

def test_lookup_of_a_completed_and_an_unknown_key(honour) -> None:
    answer = post(honour, image(), "known")
    found = lookup(honour, "known")
    assert found.status_code == 200
    assert found.json() == {"status": "completed", "response": answer.json()}
    missing = lookup(honour, "never-sent")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_key"
    assert "never-sent" in missing.json()["error"]["message"]
    assert lookup(honour, "known", api_key="wrong").status_code == 401
    assert [r.method for r in honour.requests] == ["POST", "GET", "GET", "GET"]
    assert honour.charged() == 1 and honour.peak_concurrency == 1  # lookups are free


def test_lookup_says_a_provider_that_ignores_keys_keeps_none(ignore) -> None:
    post(ignore, image(), "k")
    missing = lookup(ignore, "k")
    assert missing.status_code == 404
    assert "keeps no requests by Idempotency-Key" in missing.json()["error"]["message"]

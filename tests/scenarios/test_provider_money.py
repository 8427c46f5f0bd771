"""Money at a real provider (issue 24): an HTTP provider on 127.0.0.1 that charges, then
fails; that completes after the client gave up; that honours or ignores idempotency
keys; that rate-limits. Counted from the provider's own charge ledger, never from ours.

* a failure the provider may have charged for is paid until proven otherwise: the
  script's own retry of the same request, and a repair, never pay it again where keys
  are ignored; where keys are honoured the same request is asked again under its key
  and the provider answers with the work it did;
* a key names one request: a repaired payload at the same identity gets another key
  (a provider that rejects a reused key with another body never sees one), and two
  deployments with the same run id never share keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import InputError
from broker.records import AttemptStatus
from tests.fakes.openai_server import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    Reply,
    charge_then_error,
    complete_late,
    ok_image,
    out_of_quota,
    rate_limited,
    redirect,
    reject,
    trickle,
    url_image,
)

from .conftest import Harness
from .repairs.corpus import _s


@pytest.fixture(params=["process", pytest.param("process+postgresql",
                                                marks=pytest.mark.postgres)])
def sandbox_kind(request: pytest.FixtureRequest) -> str:
    return request.param


def _harness(make_harness: Callable[..., Harness], server: FakeOpenAIServer, *,
             honours: bool = False, timeout: float = 5.0, home: str | None = None,
             **settings: Any) -> Harness:
    return make_harness(provider="http", provider_base_url=server.base_url,
                        provider_api_key=FAKE_API_KEY, provider_timeout_seconds=timeout,
                        provider_honours_idempotency_key=honours, home=home, **settings)


def _run(harness: Harness, script: str, run_id: str = "run-1") -> dict[str, Any]:
    return harness.pipeline.run(run_id, script, {}, Envelope()).to_json()


RETRYING = _s('''
    async def orchestrate(ctx, args):
        for attempt in range(3):
            try:
                hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
                return hero["artifact"]["id"]
            except CapabilityError as e:
                last = e.charged
        return last
''')
REPAIRED = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff, at dawn"})
        return hero["artifact"]["id"]
''')
ONE = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        return hero["artifact"]["id"]
''')


def test_a_charged_5xx_is_never_paid_again_where_keys_are_ignored(make_harness) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, charge_then_error(500))
        harness = _harness(make_harness, server)
        first = _run(harness, RETRYING)
        # The script's own retry loop asks for the same request again: refused, unpaid.
        assert first["status"] == "stopped", first
        assert first["error"]["type"] == "SemanticRepeatDenied"
        assert "may have charged" in first["error"]["message"]
        assert server.charged() == 1
        (attempt,) = harness.services.store.list_attempts("run-1")
        assert attempt.status is AttemptStatus.UNCERTAIN and attempt.sent_at is not None
        repair = _run(harness, ONE)  # the same request in a repair: an operator decides
        assert repair["status"] == "stopped"
        assert repair["error"]["type"] == "SemanticRepeatDenied"
        assert "may have charged" in repair["error"]["message"]
        assert "revise reconcile" in repair["error"]["message"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 1


@pytest.mark.parametrize("answer, settings", [
    (trickle(0.05, then=ok_image()), {"timeout": 0.5}),  # a 200 answer is charged
    (lambda request, server: Reply(200, None, raw=b'{"data": [{"b64_json": "'
                                   + b"A" * (4 << 20) + b'"}]}'),
     {"artifact_max_bytes": 1 << 16}),
], ids=["trickled past the timeout", "larger than any artifact"])
def test_a_paid_answer_the_adapter_cuts_off_is_never_paid_again(
        make_harness, answer, settings) -> None:
    """An answer that is still arriving at the call's timeout, or that grows past what any
    artifact may take, is cut off: the provider did the work, so the attempt is paid until
    an operator says otherwise, and the script's own retry does not pay again."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, answer)
        harness = _harness(make_harness, server, **settings)
        first = _run(harness, RETRYING)
        assert first["status"] == "stopped", first
        assert first["error"]["type"] == "SemanticRepeatDenied"
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 1
        (attempt,) = harness.services.store.list_attempts("run-1")
        assert attempt.status is AttemptStatus.UNCERTAIN


TEXT = _s('''
    async def orchestrate(ctx, args):
        reply = await ctx.run("text.generate", {"prompt": "a caption"})
        return reply["text"]
''')


def test_a_paid_answer_in_an_odd_shape_is_committed_and_the_run_ends(make_harness) -> None:
    """Half a surrogate pair escaped in the reply's JSON and a usage that is a list: the
    answer was paid for, so it is committed and the run ends (the certificate's hash of
    the text raised, after the commit, and left the revision running)."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(CHAT, lambda request, server: Reply(200, {
            "choices": [{"message": {"content": "sunset \ud800"}}], "usage": [3]}))
        harness = _harness(make_harness, server)
        report = _run(harness, TEXT)
        assert report["status"] == "succeeded", report["error"]
        assert report["result"] == "sunset \ufffd" and server.charged() == 1
        (slot,) = harness.services.store.list_slots("run-1")
        assert (slot.usage["prompt_tokens"], slot.usage["completion_tokens"]) == (0, 0)


def test_a_charged_5xx_is_answered_under_its_key_where_keys_are_honoured(make_harness
                                                                        ) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(502))
        harness = _harness(make_harness, server, honours=True)
        first = _run(harness, ONE)
        assert first["status"] == "succeeded", first["error"]
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(keys) == 2 and keys[0] == keys[1]  # asked again under the same key
        assert server.charged() == 1


@pytest.mark.parametrize("after", [
    (rate_limited(0), rate_limited(0)), (reject(400),)], ids=["rate limited", "refused"])
def test_a_charge_asked_again_under_its_key_stays_paid_whatever_comes_after(
        make_harness, after) -> None:
    """Asked again under its key after a charged 5xx, the provider answers with something
    free (its gateway's rate limiter or a 4xx, before any key is read): the first answer
    still may have been charged, so the attempt is uncertain, not a plain failure that a
    later revision pays again. The next revision asks under the key and gets the work."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(500))
        server.in_front(IMAGES, None, *after)
        harness = _harness(make_harness, server, honours=True)
        first = _run(harness, ONE)
        assert first["status"] == "failed", first
        assert first["error"]["charged"] == "maybe", first["error"]
        assert "after an answer it may have charged for" in first["error"]["message"]
        assert len(server.requests_to(IMAGES)) == 1 + len(after)
        (attempt,) = harness.services.store.list_attempts("run-1")
        assert attempt.status is AttemptStatus.UNCERTAIN
        assert first["calls"]["uncertain"] == 1 and first["spend"] > 0
        again = _run(harness, ONE)
        assert again["status"] == "succeeded", again["error"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 2 + len(after)


def test_a_charged_503_is_asked_again_when_it_says_where_keys_are_honoured(make_harness
                                                                          ) -> None:
    """An overloaded provider's 503 says when to come back: asked again under its key, it
    is asked then, not 0.2 s later."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        def overloaded(request, server):
            reply = charge_then_error(503)(request, server)
            reply.headers["Retry-After"] = "2"
            return reply
        server.queue(IMAGES, overloaded)
        harness = _harness(make_harness, server, honours=True)
        assert _run(harness, ONE)["status"] == "succeeded"
        first, again = server.requests_to(IMAGES)
        assert again.at - first.at >= 2.0 and server.charged() == 1


def test_a_late_completion_is_answered_under_its_key_where_keys_are_honoured(
        make_harness) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, complete_late(1.5))
        harness = _harness(make_harness, server, honours=True, timeout=0.5)
        first = _run(harness, ONE)
        assert first["status"] == "succeeded", first["error"]
        assert server.charged() == 1


REPEATS = _s('''
    async def orchestrate(ctx, args):
        shots = []
        for i in range(3):
            shot = await ctx.run("image.generate", {"prompt": "same retake"})
            shots.append(shot["artifact"]["id"])
        return shots
''')


@pytest.mark.parametrize("policy", ["warn", "off"])
def test_a_repeat_the_ledger_policy_lets_pay_asks_for_new_work_under_its_own_key(
        make_harness, policy) -> None:
    """Under warn or off a repeat of a request pays again (a retake): under the first
    one's key a provider that honours keys answered each repeat with the first picture,
    charged once, while the run booked three."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server, honours=True, ledger_policy=policy)
        report = _run(harness, REPEATS)
        assert report["status"] == "succeeded", report["error"]
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(keys) == len(set(keys)) == 3
        assert server.charged() == 3 == report["calls"]["executed"]


def test_a_repaired_payload_after_a_charged_failure_is_another_request(make_harness
                                                                       ) -> None:
    """A charged 5xx at an identity, then a repair that changes the payload there: the old
    key would have fetched the old picture for the new prompt (a provider that
    deduplicates) or been refused (one that checks the body). The new payload is another
    request with its own key, and its own picture."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(500))
        harness = _harness(make_harness, server)  # the operator did not say keys work
        first = _run(harness, ONE)
        assert first["status"] == "failed" and first["error"]["charged"] == "maybe"
        repair = _run(harness, REPAIRED)
        assert repair["status"] == "succeeded", repair["error"]
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(set(keys)) == 2 and server.charged() == 2
        (slot,) = harness.services.store.list_slots("run-1")
        assert slot.result["prompt"] == "hero on a cliff, at dawn"
        assert slot.identity == harness.services.store.list_attempts("run-1")[0].identity


def test_a_redirect_is_free_when_the_api_moved_and_paid_when_it_says_done(make_harness
                                                                         ) -> None:
    """An http:// base URL sent to https:// (308): nothing was done, the run fails with
    the base URL to set and nothing paid; the repair the operator runs after fixing it
    pays once. A 303 after the work ("done, see there"): paid until proven otherwise,
    and the script's own retry does not pay again."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, redirect(308, "https://images.example.test/v1/images/generations"))
        harness = _harness(make_harness, server)
        moved = _run(harness, ONE)
        assert moved["status"] == "failed" and moved["error"]["charged"] == "no"
        assert "set REVISE_PROVIDER_BASE_URL to https://images.example.test/v1" in \
            moved["error"]["message"]
        (attempt,) = harness.services.store.list_attempts("run-1")
        assert attempt.status is AttemptStatus.FAILED and server.charged() == 0
        assert _run(harness, ONE)["status"] == "succeeded" and server.charged() == 1

        server.queue(IMAGES, redirect(303, "/v1/jobs/7", done=True))
        done = _run(harness, RETRYING, "run-2")
        assert done["status"] == "stopped" and done["error"]["type"] == "SemanticRepeatDenied"
        assert server.charged() == 2 and len(server.requests_to(IMAGES)) == 3
        (attempt,) = harness.services.store.list_attempts("run-2")
        assert attempt.status is AttemptStatus.UNCERTAIN


def test_a_rate_limited_request_waits_its_retry_after_and_pays_once(make_harness) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, rate_limited(1))
        harness = _harness(make_harness, server)
        first = _run(harness, ONE)
        assert first["status"] == "succeeded", first["error"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 2


def test_an_image_answered_by_address_is_committed_and_replayed(make_harness) -> None:
    """The answer gives the picture's address (DALL-E's default): the paid picture is
    fetched and committed, and a repair replays it without asking again."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, url_image())
        harness = _harness(make_harness, server)
        first = _run(harness, ONE)
        assert first["status"] == "succeeded", first["error"]
        (image,) = server.files.values()
        assert harness.services.artifacts.get(first["result"]) == image
        again = _run(harness, ONE)
        assert again["status"] == "succeeded" and again["result"] == first["result"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 1


def test_an_account_out_of_quota_fails_the_call_at_once_and_free(make_harness) -> None:
    """OpenAI's 429 insufficient_quota is no rate limit: it is not waited for and asked
    again (holding every call to the provider), and it cost nothing."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, *[out_of_quota()] * 5)
        harness = _harness(make_harness, server, unknown_outcome_retries=3)
        report = _run(harness, ONE)
        assert report["status"] == "failed" and report["error"]["charged"] == "no"
        assert report["error"]["code"] == "quota_exceeded"
        assert "out of quota" in report["error"]["message"]
        assert len(server.requests_to(IMAGES)) == 1 and server.charged() == 0


FOUR = _s('''
    async def orchestrate(ctx, args):
        async def shot(i):
            return await ctx.run("image.generate", {"prompt": "shot " + str(i)})

        images = await ctx.parallel([shot(i) for i in range(4)])
        return [image["artifact"]["id"] for image in images]
''')


def test_a_rate_limit_holds_back_every_request_of_the_process(make_harness) -> None:
    """Two requests in flight at once (REVISE_PROVIDER_CONCURRENCY=2); the first is
    answered 429 with Retry-After 2: nothing more leaves the process for that provider
    before the 2 s have passed (the other request in flight finishes), then every call
    is paid once."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, rate_limited(2))
        harness = _harness(make_harness, server, provider_concurrency=2)
        report = harness.pipeline.run("run-1", FOUR, {}, Envelope(concurrency=4)).to_json()
        assert report["status"] == "succeeded", report["error"]
        assert server.charged() == 4
        limited, *rest = server.requests_to(IMAGES)
        held_back = [r for r in rest if r.at > limited.at + 0.1]  # not already in flight
        assert len(held_back) == 3 and all(r.at >= limited.at + 1.9 for r in held_back)


@pytest.mark.parametrize("policy", ["warn", "off"])
def test_a_retry_keeps_its_key_when_the_ledger_policy_changed(make_harness, policy) -> None:
    """A charged 5xx under the default policy, the same request asked again at the same
    identity by a revision under warn or off: the key is the one the identity asked it
    under, so a provider that honours keys answers with the work it did (charged once)."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        harness = _harness(make_harness, server, honours=True, unknown_outcome_retries=0)
        server.queue(IMAGES, charge_then_error(500))
        first = _run(harness, ONE)
        assert first["status"] == "failed" and first["error"]["charged"] == "maybe"
        again = harness.pipeline.run("run-1", ONE, {}, Envelope(ledger_policy=policy)).to_json()
        assert again["status"] == "succeeded", again["error"]
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(keys) == 2 and keys[0] == keys[1] and server.charged() == 1


TWO_CAUGHT = _s('''
    async def orchestrate(ctx, args):
        out = []
        for prompt in ["first", "second"]:
            try:
                out.append((await ctx.run("image.generate", {"prompt": prompt}))["artifact"])
            except CapabilityError as e:
                out.append(e.message)
        return out
''')


@pytest.mark.parametrize("why", ["retries used up", "a wait past the cap"])
def test_a_rate_limit_that_ends_a_call_still_holds_back_the_next_request(
        make_harness, monkeypatch, why) -> None:
    """The call the provider rate-limited fails (its retries are used up, or the wait it
    asks for is longer than a call waits): the next request of the process still waits
    what the provider asked for, and the failure says what that was."""
    if why == "a wait past the cap":
        monkeypatch.setattr("broker.spend.RATE_LIMIT_WAIT_CAP", 1.0)
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, rate_limited(2))
        harness = _harness(make_harness, server, unknown_outcome_retries=0)
        report = _run(harness, TWO_CAUGHT)
        assert report["status"] == "succeeded", report["error"]
        failed, image = report["result"]
        assert isinstance(image, dict) and image["id"].startswith("sha256:")
        assert ("asked to wait 2 s" if why == "a wait past the cap"
                else "still rate limited after 1 tries") in failed
        limited, second = server.requests_to(IMAGES)
        assert second.at >= limited.at + 1.9 and server.charged() == 1


def test_a_refused_request_is_free_and_may_be_asked_again(make_harness) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, reject(400, "the prompt was refused"))
        harness = _harness(make_harness, server)
        first = _run(harness, RETRYING)
        assert first["status"] == "succeeded", first["error"]
        assert server.charged() == 1 and len(server.requests_to(IMAGES)) == 2
        statuses = [a.status for a in harness.services.store.list_attempts("run-1")]
        assert statuses == [AttemptStatus.FAILED, AttemptStatus.SUCCEEDED]


def test_two_deployments_with_one_run_id_never_share_a_key(make_harness, sandbox_kind
                                                           ) -> None:
    if sandbox_kind.endswith("postgresql"):
        pytest.skip("both harnesses share one PostgreSQL database: that is one deployment")
    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        ours = _harness(make_harness, server, honours=True, home="ours")
        theirs = _harness(make_harness, server, honours=True, home="theirs")
        assert _run(ours, ONE, "scout")["status"] == "succeeded"
        assert _run(theirs, ONE, "scout")["status"] == "succeeded"
        keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
        assert len(set(keys)) == 2 and server.charged() == 2


def test_the_sweep_asks_the_provider_and_commits_what_it_kept(make_harness) -> None:
    """A provider that keeps requests by key can be asked (REVISE_PROVIDER_LOOKUP_PATH):
    the uncertain attempt is resolved with the result it kept, and the repair replays it
    for free; a 5xx it never charged for (no record of the key) is abandoned instead."""
    from orchestrator.reconcile import resolve_by_lookup

    with FakeOpenAIServer(api_key=FAKE_API_KEY, idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(500), reject(503))
        harness = _harness(make_harness, server, provider_lookup_path="/requests/{key}")
        first = _run(harness, ONE)
        assert first["error"]["charged"] == "maybe"
        second = _run(harness, REPAIRED, run_id="run-2")
        assert second["error"]["charged"] == "maybe"
        store = harness.services.store
        decided = resolve_by_lookup(store, harness.services.provider,
                                    harness.services.artifacts)
        assert sorted((d["run_id"], d["decision"]) for d in decided) == [
            ("run-1", "resolved"), ("run-2", "abandoned")]
        assert server.charged() == 1
        repair = _run(harness, ONE)
        assert repair["status"] == "succeeded", repair["error"]
        assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (1, 0)
        again = _run(harness, REPAIRED, run_id="run-2")  # never charged: asked again
        assert again["status"] == "succeeded", again["error"]
        assert server.charged() == 2


@pytest.mark.parametrize("where", ["a provider that keeps no keys", "a wrong lookup path"])
def test_a_lookup_that_knows_no_key_never_abandons_a_paid_call(make_harness, where
                                                                ) -> None:
    """A 404 means "never received" only from a lookup that knows the keys the provider
    did receive: one that answers 404 for every key (the provider keeps none, or the
    path is wrong) would abandon a charged call, and the next submit pay it again."""
    from orchestrator.reconcile import ask_provider, resolve_by_lookup

    honours = where == "a wrong lookup path"
    with FakeOpenAIServer(api_key=FAKE_API_KEY,
                          idempotency="honour" if honours else "ignore") as server:
        server.queue(IMAGES, ok_image(), charge_then_error(500))
        harness = _harness(make_harness, server, provider_lookup_path="/lookup/{key}"
                           if honours else "/requests/{key}")
        assert _run(harness, ONE, run_id="run-0")["status"] == "succeeded"
        first = _run(harness, ONE)
        assert first["error"]["charged"] == "maybe" and server.charged() == 2
        store = harness.services.store
        assert resolve_by_lookup(store, harness.services.provider,
                                 harness.services.artifacts) == []
        with pytest.raises(InputError, match="REVISE_PROVIDER_LOOKUP_PATH"):
            ask_provider(store, harness.services.provider, "run-1", first["error"]["identity"])
        [attempt] = store.list_attempts("run-1")
        assert attempt.status is AttemptStatus.UNCERTAIN
        again = _run(harness, ONE)
        assert again["status"] != "succeeded" and server.charged() == 2


FANOUT = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        images = await ctx.parallel([gen(p) for p in ["a", "b", "c", "d", "e", "f"]])
        return len(images)
''')


def test_a_provider_concurrency_limit_is_honoured(make_harness) -> None:
    from tests.fakes.openai_server import slow

    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, *[slow(0.4) for _ in range(6)])
        harness = _harness(make_harness, server, provider_concurrency=2)
        report = harness.pipeline.run("run-1", FANOUT, {}, Envelope(concurrency=6)).to_json()
        assert report["status"] == "succeeded", report["error"]
        assert server.charged() == 6 and server.peak_concurrency == 2

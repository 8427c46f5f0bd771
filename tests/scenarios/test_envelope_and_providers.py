"""Issue 4 through the real pipeline: HTTP provider failure classes, budget, grants, dry-run."""

from __future__ import annotations

import pytest

from broker.envelope import Budget, Envelope
from broker.records import AttemptStatus
from broker.settings import SandboxKind
from tests.fakes import FAKE_API_KEY, IMAGES, FakeOpenAIServer, error, ok_image, slow

from .conftest import Harness


@pytest.fixture
def sandbox_kind() -> str:
    return SandboxKind.PROCESS.value


@pytest.fixture
def server():
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as running:
        yield running


def http_harness(make_harness, server: FakeOpenAIServer, timeout: float = 5.0) -> Harness:
    return make_harness(provider="http", provider_base_url=server.base_url,
                        provider_api_key=FAKE_API_KEY, provider_timeout_seconds=timeout)


def artifact_bytes(harness: Harness, ids: list[str]) -> list[bytes]:
    return [harness.services.artifacts.get(i) for i in ids]


def _keys(server: FakeOpenAIServer) -> list[str]:
    return [r.headers.get("idempotency-key", "") for r in server.requests_to(IMAGES)]


def test_unknown_model_404_then_repair_outside_the_call(make_harness, server) -> None:
    harness = http_harness(make_harness, server)
    first = harness.run("http_model_v1")
    assert first["status"] == "failed"
    assert first["error"]["code"] == "model_not_found"
    assert first["calls"] == {"executed": 2, "succeeded": 1, "failed": 1,
                              "uncertain": 0, "replayed": 0,
                              "denied": 0}
    committed_slot = harness.services.store.list_slots("run-1")[0]
    committed = committed_slot.result["artifact"]["id"]
    assert committed_slot.usage["idempotency_key_sent"] is True  # the HTTP API can dedupe
    assert all(line["idempotency_covered"] for line in harness.provider_log())
    repair = harness.run("http_model_v2")
    assert repair["status"] == "succeeded"
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (1, 1)
    assert repair["result"][0] == committed
    assert len(server.requests_to(IMAGES)) == 3
    assert all(key.startswith("revise-") for key in _keys(server))


def test_openai_models_are_asked_in_the_fields_they_take(make_harness, server) -> None:
    """The fake refuses as api.openai.com does: response_format for a GPT image model,
    max_tokens for a reasoning model. Both calls were refused (400) before."""
    harness = http_harness(make_harness, server)
    report = harness.run("http_openai_models")
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 2 and report["calls"]["failed"] == 0
    image, text = (r.body for r in server.requests)
    assert image["model"] == "gpt-image-1" and "response_format" not in image
    assert text["model"] == "gpt-5" and text["max_completion_tokens"] == 256
    assert "max_tokens" not in text


def test_forbidden_403_then_retry_executes_the_failed_identity_once(make_harness,
                                                                    server) -> None:
    harness = http_harness(make_harness, server)
    server.queue(IMAGES, ok_image(), error(403, "this key cannot use the model"))
    first = harness.run("http_model_v2")
    assert first["status"] == "failed"
    assert first["error"]["code"] == "auth"
    assert FAKE_API_KEY not in str(first)
    repair = harness.run("http_model_v2")
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (1, 1)
    keys = _keys(server)
    assert keys[1] == keys[2], "a retry of the same identity carries the same idempotency key"
    assert keys[0] != keys[1]


def test_a_timeout_is_paid_until_an_operator_says_otherwise(make_harness, server) -> None:
    """The request left and no answer came within the timeout: the provider may have
    rendered (and charged for) the picture. With a provider that ignores keys, the repair
    is stopped before it asks again, naming the way to resolve it, never paying twice."""
    harness = http_harness(make_harness, server, timeout=0.5)
    server.queue(IMAGES, ok_image(), slow(2.0))
    first = harness.run("http_model_v2")
    assert first["status"] == "failed"
    assert (first["error"]["code"], first["error"]["charged"]) == ("timeout", "maybe")
    assert [a.status for a in harness.services.store.list_attempts("run-1")] == [
        AttemptStatus.SUCCEEDED, AttemptStatus.UNCERTAIN]
    repair = harness.run("http_model_v2")
    assert repair["status"] == "stopped"
    assert repair["error"]["type"] == "AttemptUnresolved"
    assert "revise reconcile" in repair["error"]["message"]
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (1, 0)
    assert len(_keys(server)) == 2


def test_a_timeout_is_asked_again_under_the_same_key_where_keys_are_honoured(
        make_harness, server) -> None:
    harness = make_harness(provider="http", provider_base_url=server.base_url,
                           provider_api_key=FAKE_API_KEY, provider_timeout_seconds=0.5,
                           provider_honours_idempotency_key=True)
    server.queue(IMAGES, ok_image(), slow(2.0))
    first = harness.run("http_model_v2")
    assert first["status"] == "succeeded", first["error"]
    keys = _keys(server)
    assert len(keys) == 3 and keys[1] == keys[2] != keys[0]  # one attempt, asked twice
    assert [a.status for a in harness.services.store.list_attempts("run-1")] == [
        AttemptStatus.SUCCEEDED, AttemptStatus.SUCCEEDED]


def test_three_way_fanout_with_one_invalid_branch(make_harness, server) -> None:
    harness = http_harness(make_harness, server)
    first = harness.run("http_fanout_v1")
    assert first["calls"]["succeeded"] == 2 and first["calls"]["failed"] == 1
    committed = {s.identity.path: s.result["artifact"]["id"]
                 for s in harness.services.store.list_slots("run-1")}
    before = artifact_bytes(harness, list(committed.values()))
    repair = harness.run("http_fanout_v2")
    assert repair["status"] == "succeeded"
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (2, 1)
    assert [repair["result"][i] for i in (0, 2)] == [committed[(0,)], committed[(2,)]]
    assert artifact_bytes(harness, [repair["result"][0], repair["result"][2]]) == before
    assert len(server.requests_to(IMAGES)) == 4


def test_budget_denies_the_call_that_crosses_the_limit(harness: Harness) -> None:
    report = harness.run("budget_sequential", envelope=Envelope(budget=Budget(max_calls=3)))
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "BudgetExceeded"
    assert "provider call 4" in report["error"]["message"]
    assert not any(line["idempotency_covered"] for line in harness.provider_log())
    assert report["calls"]["executed"] == 3
    assert report["calls"]["denied"] == 1
    assert len(harness.provider_log()) == 3


def test_a_fanout_wave_past_the_budget_dispatches_none_of_it(harness: Harness) -> None:
    """Wave-first: the five calls of one fanout are claimed together, and the budget's
    denial of the fourth stops the wave before any of it reaches the provider."""
    report = harness.run("budget_fanout", envelope=Envelope(budget=Budget(max_calls=3),
                                                            concurrency=1))
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "BudgetExceeded"
    assert "provider call 4" in report["error"]["message"]
    assert (report["calls"]["executed"], report["calls"]["denied"]) == (0, 1)
    assert harness.provider_log() == []


def test_replays_are_free_under_a_budget(harness: Harness) -> None:
    harness.run("budget_fanout", envelope=Envelope(budget=Budget(max_calls=5)))
    again = harness.run("budget_fanout", envelope=Envelope(budget=Budget(max_calls=5)))
    assert again["status"] == "succeeded"
    assert again["calls"]["replayed"] == 5


def test_ungranted_capability_is_denied(harness: Harness) -> None:
    report = harness.run("budget_fanout", envelope=Envelope(grants=["text.generate"]))
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "CapabilityDenied"
    assert "not granted" in report["error"]["message"]
    assert report["calls"]["executed"] == 0
    assert harness.provider_log() == []


def test_catalog_only_capability_is_denied_in_a_real_run(harness: Harness) -> None:
    report = harness.run("video_dry_run",
                         envelope=Envelope(grants=["video.generate", "image.generate"]))
    assert report["error"]["type"] == "CapabilityDenied"
    assert "catalog-only" in report["error"]["message"]


def test_catalog_only_capability_is_answered_in_dry_run(harness: Harness) -> None:
    report = harness.run("video_dry_run", envelope=Envelope(grants=["video.generate"],
                                                            dry_run=True))
    assert report["status"] == "succeeded"
    assert report["result"]["dry_run"] is True


def test_bad_payload_is_denied_naming_the_field(harness: Harness) -> None:
    report = harness.pipeline.run(
        "bad", 'async def orchestrate(ctx, args):\n'
               '    return await ctx.run("image.generate", {"prompt": "x", "colour": "red"})\n',
        {}, Envelope()).to_json()
    assert report["error"]["type"] == "CapabilityDenied"
    assert "colour" in report["error"]["message"]
    assert harness.provider_log() == []


def test_budget_max_cost_denies_the_call_that_would_overspend(harness: Harness) -> None:
    report = harness.run("budget_sequential",
                         envelope=Envelope(budget=Budget(max_cost=0.05)))
    assert report["error"]["type"] == "BudgetExceeded"
    assert "0.06" in report["error"]["message"]
    assert len(harness.provider_log()) == 2  # 2 x 0.02 spent; the third would be 0.06


def test_capability_needing_approval_is_denied_until_approved(harness: Harness) -> None:
    gated = Envelope(approvals_required=["image.generate"])
    denied = harness.run("budget_fanout", envelope=gated)
    assert denied["error"]["type"] == "CapabilityDenied"
    assert "approval" in denied["error"]["message"]
    assert harness.provider_log() == []
    approved = harness.run("budget_fanout", envelope=Envelope(
        approvals_required=["image.generate"], approvals=["image.generate"]))
    assert approved["status"] == "succeeded"

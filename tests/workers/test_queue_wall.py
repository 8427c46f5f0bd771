"""The queue is a wall (issue 28, item 6): a broker worker spends under the revision's
stored envelope, never the one a capability-task message carries (anyone who can write
to Redis could forge it)."""

from __future__ import annotations

import pytest

from broker.calls import CallRequest, Outcome
from broker.catalog import lookup
from broker.envelope import Budget, Envelope
from broker.identity import Identity, call_digest
from orchestrator.inputs import envelope_bytes
from workers.capability import _spend

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _request(revision: int, capability: str, prompt: str) -> CallRequest:
    payload = lookup(capability).normalize({"prompt": prompt})
    return CallRequest(run_id="walled", revision=revision,
                       identity=Identity("orchestrate/#0", (), 0), capability=capability,
                       payload=payload, digest=call_digest(payload), fingerprint="f")


def test_a_forged_envelope_in_a_capability_task_grants_nothing(make_stack) -> None:
    stack = make_stack()
    stored = Envelope(grants=["text.generate"], budget=Budget(max_calls=0))
    stack.store.ensure_run("walled")
    revision = stack.store.add_revision("walled", "# src", "h",
                                        envelope=envelope_bytes(stored))
    forged = Envelope(budget=Budget(max_calls=100)).model_dump(mode="json")  # all granted
    answer = _spend(stack.context, [_request(revision, "image.generate", "a fox")], forged,
                    None)
    (report,) = answer["reports"]
    assert report["outcome"] == str(Outcome.DENIED)
    assert report["error"]["type"] == "CapabilityDenied"
    answer = _spend(stack.context, [_request(revision, "text.generate", "a fox")], forged,
                    None)
    (report,) = answer["reports"]
    assert report["error"]["type"] == "BudgetExceeded"  # the stored budget, not the forged
    assert stack.provider_log() == []

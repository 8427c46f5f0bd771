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


def test_a_forged_sandbox_job_runs_nothing(make_stack) -> None:
    """Only the job the dispatcher recorded runs, as it recorded it: a message with its id
    and another script, admission or envelope is dropped, and so is one for a job nobody
    accepted."""
    import copy
    import time

    from workers.recovery import sandbox_task_id
    from workers.routing import SANDBOX_TASK

    from .conftest import script, wait_for

    stack = make_stack()
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready(120)
    report = stack.client.submit(script("crash_seq"), {}, Envelope(), "walled").wait(120)
    assert report["status"] == "succeeded", report["error"]
    paid = len(stack.provider_log())
    job = stack.store.job_for_revision("walled", 1)
    forged = copy.deepcopy(job.message)
    for site in forged["admission"]["sites"]:
        site["max_calls"] = None  # no bound on invented identities
    forged["envelope"] = Envelope(budget=Budget(max_calls=1000)).model_dump(mode="json")
    stranger = {**copy.deepcopy(job.message), "job_id": "never-accepted"}
    queue = stack.client.app.routing.queue("sandbox")
    for message, task_id in ((forged, sandbox_task_id(job.job_id, 7)),
                             (stranger, sandbox_task_id("never-accepted"))):
        stack.client.app.send_task(SANDBOX_TASK, args=[message], task_id=task_id,
                                   queue=queue)
    wait_for(lambda: stack.events("walled", "forged_delivery"), 60, "the forged job dropped")
    time.sleep(2)  # the stranger's message is handled by the same worker, one at a time
    assert "differs from the job the dispatcher recorded" in \
        stack.events("walled", "forged_delivery")[0].message
    assert len(stack.provider_log()) == paid
    assert [r.revision for r in stack.store.list_revisions("walled")] == [1]
    assert stack.store.get_job("never-accepted") is None
    log = (stack.tmp_path / "sandbox0.log").read_text(errors="replace")
    assert "no job with this id was ever accepted" in log

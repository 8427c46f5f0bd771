"""The queue is a wall (issue 28, item 6): a capability task names claimed attempts by
id and a broker worker executes only what the run store claimed, under the revision's
stored envelope (anyone who can write to Redis can queue a message)."""

from __future__ import annotations

import pytest

from broker.calls import CallRequest, Outcome
from broker.catalog import lookup
from broker.claim import Claimer
from broker.envelope import Budget, Envelope
from broker.identity import Identity, call_digest
from orchestrator.inputs import envelope_bytes
from workers.capability import _execute
from workers.messages import ExecuteCalls

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _request(revision: int, capability: str, prompt: str, at: int = 0) -> CallRequest:
    payload = lookup(capability).normalize({"prompt": prompt})
    return CallRequest(run_id="walled", revision=revision,
                       identity=Identity("orchestrate/#0", (), at), capability=capability,
                       payload=payload, digest=call_digest(payload), fingerprint="f")


def test_a_capability_task_executes_only_what_the_store_claimed(make_stack) -> None:
    stack = make_stack()
    stored = Envelope(grants=["text.generate"], budget=Budget(max_calls=2))
    stack.store.ensure_run("walled")
    revision = stack.store.add_revision("walled", "# src", "h",
                                        envelope=envelope_bytes(stored))
    claimer = Claimer(store=stack.store, envelope=stored, settings=stack.settings)
    (decided,) = claimer.claim([_request(revision, "text.generate", "a fox")])
    assert decided.claimed is not None
    attempt = decided.claimed.attempt

    def execute(run_id: str, ids: list[int]) -> list:
        return _execute(stack.context, ExecuteCalls(run_id=run_id, revision=revision,
                                                    attempts=ids))

    assert execute("walled", [attempt.id + 1000]) == []  # never claimed
    assert execute("another-run", [attempt.id]) == []  # another run's name on it
    (report,) = execute("walled", [attempt.id])
    assert report.outcome is Outcome.EXECUTED and len(stack.provider_log()) == 1
    assert execute("walled", [attempt.id]) == []  # taken once: a copy finds nothing
    (later,) = claimer.claim([_request(revision, "text.generate", "a hen", at=1)])
    assert later.claimed is not None
    stack.store.finish_revision("walled", revision, "stopped", {})
    assert execute("walled", [later.claimed.attempt.id]) == []  # its revision stopped
    assert len(stack.provider_log()) == 1


def test_a_forged_sandbox_job_runs_nothing(make_stack) -> None:
    """Only the job the dispatcher recorded runs, as it recorded it: a message with its id
    and another script, admission or envelope is dropped, and so is one for a job nobody
    accepted."""
    import copy
    import time

    from workers.recovery import sandbox_task_id
    from workers.routing import SANDBOX_TASK

    from .conftest import finished_run, wait_for

    stack, job = finished_run(make_stack, "walled")
    paid = len(stack.provider_log())
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

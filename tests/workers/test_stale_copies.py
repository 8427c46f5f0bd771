"""Copies of a sandbox task the job has moved past never touch its revision: a copy of a
finished job's task, one past the start limit (the crash-loop give-up), one under a
resume number the job never had, are each acknowledged as a counted duplicate and leave
the run as it ended. Only a job that really crash-looped is failed by the give-up."""

from __future__ import annotations

from typing import Any

import pytest

from broker.envelope import Envelope
from workers.outcome import answer_of
from workers.recovery import sandbox_task_id
from workers.routing import SANDBOX_TASK

from .conftest import finished_run, script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _send_copy(stack: Any, message: dict[str, Any], task_id: str) -> dict[str, Any]:
    stack.client.app.AsyncResult(task_id).forget()
    sent = stack.client.app.send_task(SANDBOX_TASK, args=[message], task_id=task_id,
                                      queue=stack.client.app.routing.queue("sandbox"))
    outcome = sent.get(60, propagate=False)
    answer = answer_of(outcome) if sent.failed() else outcome
    assert isinstance(answer, dict), outcome
    return answer


def test_copies_of_a_finished_job_are_stale_and_a_crash_loop_gives_up(make_stack) -> None:
    stack, job = finished_run(make_stack, "copied")
    paid = len(stack.provider_log())
    lease = stack.context.lease
    task_id = sandbox_task_id(job.job_id)

    again = _send_copy(stack, job.message, task_id)  # its answer is kept: DONE
    lease._redis.delete(lease._key(task_id, "done"))
    lease._redis.set(lease._key(task_id, "starts"), lease.max_deliveries)
    past_limit = _send_copy(stack, job.message, task_id)  # a crash loop's give-up
    unknown = _send_copy(stack, job.message, sandbox_task_id(job.job_id, 3))
    for answer in (again, past_limit, unknown):
        assert answer["duplicate"] is True and answer["status"] == "succeeded", answer
    assert len(stack.events("copied", "stale_delivery")) == 3
    assert stack.store.get_revision("copied", 1).status == "succeeded"
    assert stack.store.get_run("copied").status == "succeeded"
    assert len(stack.provider_log()) == paid

    # A job whose sandbox worker died at each of its starts: the next start gives up.
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "looping", send=False)
    lease._redis.set(lease._key(sandbox_task_id(handle.job_id), "starts"),
                     lease.max_deliveries)
    handle.send()
    looped = handle.wait(60)
    assert looped["status"] == "failed"
    assert "gave up after 3 deliveries" in looped["error"]["message"]
    assert stack.store.get_revision("looping", 1).status == "failed"
    assert stack.store.get_run("looping").status == "failed"
    assert stack.store.get_job(handle.job_id).status == "finished"
    assert [e.message for e in stack.events("looping", "sandbox_failed")] == [
        stack.store.get_run("looping").detail]
    assert len(stack.provider_log()) == paid

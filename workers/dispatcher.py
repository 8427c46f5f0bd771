"""The dispatcher (``-Q dispatch``): check → annotate → gate, before anything is spent.

It runs the pre-spend half of the pipeline (``Pipeline.admit``), once per job.
A refused candidate is finished here: its violations or gate counterexamples
are stored with its revision and returned, and it never reaches a sandbox
worker. An accepted one is numbered and handed to the ``sandbox`` queue as one
job that carries the admission (the annotated text and the site table), so the
sandbox worker only runs the gate again against the prefix as it then is.

The answer (also kept by the job lease, so a redelivery does not number a
second revision) is ``{job_id, run_id, accepted, revision, report | error}``.
A message that is not a valid ``DispatchJob`` is answered at once with an
``InvalidMessage`` error (``workers.messages``); nothing else is touched.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.envelope import Envelope
from broker.errors import DispatchFailed, JobInFlight, ReviseError, StoreUnavailable
from orchestrator.pipeline import Admitted, Pipeline
from workers.app import ReviseTask, app
from workers.context import WorkerContext
from workers.lease import Grant, run_leased
from workers.messages import DispatchJob, InvalidMessage, check_task_id, name_in, parse_message
from workers.outbox import forget
from workers.outcome import RunFailed, RunStopped, run_outcome
from workers.recovery import sandbox_task_id
from workers.routing import DISPATCH_TASK, SANDBOX_TASK, enqueue

log = logging.getLogger("revise.dispatcher")
_limits = app.queue_settings


@app.task(name=DISPATCH_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          throws=(RunFailed, RunStopped), time_limit=_limits.dispatch_time_limit)
def dispatch(self: ReviseTask, job: dict[str, Any]) -> dict[str, Any]:
    """The job's answer; a refused candidate or a refused job raises it as FAILURE."""
    return _settle(_answer_job(self, job))


def _answer_job(self: ReviseTask, job: dict[str, Any]) -> dict[str, Any]:
    job_id = self.request.id
    try:
        check_task_id(job_id, "dispatch job")
        parse_message(DispatchJob, job, "dispatch job")
    except InvalidMessage as exc:
        return _answer(job_id, {"run_id": name_in(job, "run_id", "run id")},
                       error=exc.to_json())
    try:
        answer = _dispatch(self.context, job_id, job)
    except StoreUnavailable as exc:
        # Nothing was queued for a sandbox: the job goes back to the queue (same id) and
        # is admitted when the store answers.
        raise self.retry(countdown=3.0, max_retries=100, exc=exc) from None
    try:  # taken: the client's copy kept against a loss is not needed (workers.outbox)
        forget(self.context.broker_redis, self.context.routing.prefix, job_id)
    except Exception as exc:  # the reconciler forgets it instead
        log.info("job %s: its kept dispatch message stays for the reconciler: %s", job_id, exc)
    return answer


def _dispatch(ctx: WorkerContext, job_id: str, job: dict[str, Any]) -> dict[str, Any]:
    accepted = ctx.store.get_job(job_id)
    if accepted is not None:  # accepted before (the answer may have been lost with Redis)
        return _answer(job_id, job, revision=accepted.revision, accepted=True)

    def duplicate(grant: Grant) -> dict[str, Any]:
        found = ctx.lease.wait_answer(job_id, ctx.queue.dispatch_time_limit)
        return found[0] if found else _answer(job_id, job, error=JobInFlight(
            f"job {job_id} is still being dispatched by {grant.holder}; wait for its answer "
            "(`revise show` lists the run's revisions)", job_id=job_id,
            holder=grant.holder).to_json())

    def give_up(grant: Grant) -> dict[str, Any]:
        return _answer(job_id, job, error=DispatchFailed(
            f"gave up after {grant.starts - 1} deliveries: the dispatcher died each time; "
            "its log says why (memory limit, crash or kill); submit again once it is fixed",
            job_id=job_id, deliveries=grant.starts - 1).to_json())

    return run_leased(ctx.lease, job_id, wait=ctx.queue.lease_seconds * 1.5,
                      uncounted=(StoreUnavailable,), duplicate=duplicate, give_up=give_up,
                      run=lambda _: _admit(ctx, job_id, job))


def _admit(ctx: WorkerContext, job_id: str, job: dict[str, Any]) -> dict[str, Any]:
    # The dispatcher never starts a sandbox or calls a provider: no runner, no executor.
    pipeline = Pipeline(store=ctx.store, runner=None, settings=ctx.settings, executor_for=None)
    message: dict[str, Any] | None = None  # the sandbox job, as the store recorded it

    def sandbox_job(admitted: Admitted) -> tuple[str, dict[str, Any]]:
        # The store is the truth about accepted jobs: recorded with the revision, before the
        # message is queued, so a message Redis loses is queued again (workers.recovery).
        nonlocal message
        assert admitted.admission is not None
        message = {"job_id": job_id, "run_id": admitted.run_id,
                   "revision": admitted.revision, "source": admitted.source.text,
                   "admission": admitted.admission.to_wire(),
                   "args_text": admitted.args_text, "envelope": job["envelope"]}
        return job_id, message

    try:
        envelope = Envelope.model_validate(job["envelope"])
        admitted = pipeline.admit(job["run_id"], job["script"], job["args"], envelope,
                                  job=sandbox_job)
    except StoreUnavailable:
        raise  # not an answer: the caller queues the job again
    except ReviseError as exc:
        return _answer(job_id, job, error=exc.to_json())
    if admitted.admission is None:
        return _answer(job_id, job, revision=admitted.revision,
                       report=admitted.report.to_json())
    assert message is not None, "an accepted revision recorded its sandbox job"
    enqueue(app, SANDBOX_TASK, ctx.routing.queue("sandbox"), task_id=sandbox_task_id(job_id),
            args=[message])
    return _answer(job_id, job, revision=admitted.revision, accepted=True)


def _settle(answer: dict[str, Any]) -> dict[str, Any]:
    """Accepted and queued: SUCCESS (the sandbox task then follows the run). Refused by
    the checker or the gate, or not admitted at all: FAILURE carrying the answer."""
    if answer["accepted"]:
        return answer
    report = answer["report"] or {}
    outcome = run_outcome({"run_id": answer["run_id"], "revision": answer["revision"],
                           "status": report.get("status", "stopped"),
                           "error": answer["error"] or report.get("error")}, carry=answer)
    if outcome is None:
        return answer
    raise outcome


def _answer(job_id: str, job: dict[str, Any], *, accepted: bool = False,
            revision: int | None = None, report: dict[str, Any] | None = None,
            error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "run_id": job["run_id"], "accepted": accepted,
            "revision": revision, "report": report, "error": error}

"""Sandbox workers (``-Q sandbox``): run an accepted candidate in its sandbox.

The pipeline's spending half (``Pipeline.execute``) runs here with a
``RemoteExecutor``: the job carries the dispatcher's admission, the gate runs
again against the prefix as it is now, replays and divergences are answered
here from that prefix, and only new calls become capability tasks on the
``capabilities`` queue.

No deadlock: a sandbox job waits only on capability tasks, and sandbox workers
never consume the ``capabilities`` queue; broker workers are separate processes
that never wait on queued work. All sandbox slots blocked on calls still leave
every capability task a worker to run on (see ``workers.remote``).

Redelivery: the job lease makes a duplicate of a running job a no-op
(``Ignore``: acknowledged, no result written over the running copy's), lets a
redelivery after a crash take over (committed identities replay, nothing is
paid twice) and fails the revision visibly after ``max_deliveries`` starts.

A message that is not a valid ``SandboxJob`` (``workers.messages``) is answered
at once with status ``failed`` and an ``InvalidMessage`` error; the store is
not touched (nothing in such a message can be trusted to name a revision).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from celery.exceptions import Ignore

from broker.claim import Claimer
from broker.envelope import Envelope
from broker.errors import ReviseError, RevisionNotRunning, SandboxError, StoreUnavailable
from broker.owner import current_owner
from orchestrator.admission import Admission
from orchestrator.pipeline import Admitted, Pipeline
from orchestrator.report import ErrorReport, RevisionStatus, RunReport
from orchestrator.source import decode_source
from sandbox.runner import kill_processes_mentioning
from workers.app import ReviseTask, app
from workers.context import WorkerContext
from workers.lease import Grant, Released, run_leased
from workers.messages import InvalidMessage, SandboxJob, name_in, parse_message
from workers.outcome import RunFailed, RunStopped, run_outcome
from workers.parking import ParkRule, wake
from workers.recovery import count_stale_delivery, resumes_of
from workers.remote import RemoteExecutor
from workers.routing import SANDBOX_TASK
from workers.transport import Transport

log = logging.getLogger("revise.workers.sandbox")

_limits = app.queue_settings


# No STARTED state in the result backend: nothing reads it (a client asks the dispatch
# task whether its job is dispatching; Flower sees the start in the task's events), and
# writing it encoded the whole job message into Redis once more as each job started.
@app.task(name=SANDBOX_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          throws=(RunFailed, RunStopped), time_limit=_limits.sandbox_time_limit,
          soft_time_limit=max(1.0, _limits.sandbox_time_limit - 30), track_started=False)
def sandbox(self: ReviseTask, job: dict[str, Any]) -> dict[str, Any]:
    try:
        parse_message(SandboxJob, job, "sandbox job")
    except InvalidMessage as exc:
        revision = job.get("revision") if isinstance(job, dict) else None
        return _settle({"run_id": name_in(job, "run_id", "run id"),
                        "revision": revision if type(revision) is int else None,
                        "status": "failed", "deliveries": 0, "error": exc.to_json()})
    try:
        _as_recorded(self.context, job, self.request.id)
        return _deliver(self, job)
    except StoreUnavailable as exc:
        # The store is away: nothing true can be written now. The job goes back to the
        # queue (same id; the lease was released) and is taken over when the store
        # answers: committed calls replay, paid results wait in the broker's spool.
        log.warning("job %s: %s; trying again in %.0f s", self.request.id, exc.message,
                    _STORE_RETRY_SECONDS)
        raise self.retry(countdown=_STORE_RETRY_SECONDS, max_retries=_STORE_RETRIES,
                         exc=exc) from None


_STORE_RETRY_SECONDS = 3.0
_STORE_RETRIES = 100  # about five minutes of outage


def _as_recorded(ctx: WorkerContext, job: dict[str, Any], task_id: str) -> None:
    """Run only a job the dispatcher recorded, exactly as it recorded it: source, args,
    admission (sites and their bounds) and envelope. Anyone who can write to Redis can
    queue a message; only the dispatcher writes the run store. Anything else is dropped
    (acknowledged, no result) and said loudly."""
    stored = ctx.store.get_job(job["job_id"])
    if stored is not None and stored.message == job:
        return
    what = ("no job with this id was ever accepted" if stored is None else
            "it differs from the job the dispatcher recorded")
    log.error("sandbox task %s dropped: %s (a forged or corrupted queue message)", task_id,
              what)
    if stored is not None:
        ctx.store.add_event(stored.run_id, "forged_delivery", f"a sandbox message for job "
                            f"{stored.job_id} was dropped: {what}; the recorded job runs "
                            "as recorded", revision=stored.revision,
                            data={"task_id": task_id[:200]})
    raise Ignore()


def _deliver(self: ReviseTask, job: dict[str, Any]) -> dict[str, Any]:
    ctx = self.context
    resumes = resumes_of(self.request.id, job["job_id"])

    def duplicate(grant: Grant) -> dict[str, Any]:
        log.info("job %s is running in %s; this delivery is a duplicate", self.request.id,
                 grant.holder)
        raise Ignore()

    answer = run_leased(
        ctx.lease, self.request.id, wait=ctx.queue.lease_seconds * 1.5,
        uncounted=(StoreUnavailable,), duplicate=duplicate,
        done=lambda grant: _stale(ctx, job),
        give_up=lambda grant: _gave_up(ctx, job, grant, resumes),
        run=lambda grant: _start(ctx, job, grant, resumes))
    return _settle_stale(answer) if answer.get("duplicate") else _settle(answer)


def _start(ctx: WorkerContext, job: dict[str, Any], grant: Grant, resumes: int | None
           ) -> Any:
    try:
        if resumes is None:
            raise RevisionNotRunning(f"the task id is not one of job {job['job_id']}'s "
                                     "sandbox tasks: nothing is started", run_id=job["run_id"])
        return _answer(_run_started(ctx, job, grant, resumes), grant)
    except RevisionNotRunning:
        return Released(_stale(ctx, job))  # finished or lost while this one waited


def _answer(report: RunReport, grant: Grant) -> dict[str, Any]:
    return run_summary(report) | {"deliveries": grant.starts}


def run_summary(report: RunReport) -> dict[str, Any]:
    """The task's result: what Flower shows for the run (the full report is in the store)."""
    cert = report.certificate
    return {"run_id": report.run_id, "revision": report.revision,
            "status": str(report.status), "result": report.result,
            "error": None if report.error is None else report.error.model_dump(mode="json"),
            "calls": report.calls.model_dump(mode="json"), "spend": report.spend,
            "certificate": None if cert is None else cert.digest}


def _settle(answer: dict[str, Any]) -> dict[str, Any]:
    """Return a succeeded run's summary; raise (FAILURE in Flower) for any other run."""
    outcome = run_outcome(answer)
    if outcome is not None:
        raise outcome
    return answer


def _stale(ctx: WorkerContext, job: dict[str, Any]) -> dict[str, Any]:
    """A delivery the job has moved past (a redelivery after a crash, a requeued copy, a
    copy of a finished job's task): acknowledged as a duplicate at once and counted for
    the operator. It answers with the revision's state, or none while the revision still
    runs (as another of the job's tasks)."""
    revision = ctx.store.get_revision(job["run_id"], job["revision"])
    ended = revision is not None and revision.status not in (RevisionStatus.RUNNING,
                                                             RevisionStatus.PARKED)
    count = count_stale_delivery(ctx, job["run_id"], job["revision"], "sandbox job")
    return {"run_id": job["run_id"], "revision": job["revision"],
            "status": revision.status if ended else None, "deliveries": 0,
            "error": (revision.summary or {}).get("error") if ended else None,
            "duplicate": True, "stale_deliveries": count}


def _settle_stale(answer: dict[str, Any]) -> dict[str, Any]:
    """A duplicate keeps the task state its revision earned (Flower shows the same
    FAILURE again), so a late copy never turns a failed run into a SUCCESS."""
    return _settle(answer) if answer.get("status") else answer


def _gave_up(ctx: WorkerContext, job: dict[str, Any], grant: Grant, resumes: int | None
             ) -> Any:
    """The revision is failed here, with its job finished, unless this delivery is a copy
    the job has moved past (then it is a stale one, and nothing is written)."""
    report = None if resumes is None else _fail(
        ctx, job, resumes, f"gave up after {grant.starts - 1} deliveries: the sandbox "
        "worker died each time (memory limit, crash or kill); committed calls are kept and "
        "replay when the run is submitted again")
    return Released(_stale(ctx, job)) if report is None else _answer(report, grant)


def _run_started(ctx: WorkerContext, job: dict[str, Any], grant: Grant, resumes: int
                 ) -> RunReport:
    if grant.starts > 1:
        _reap(ctx.settings.runs_dir / job["run_id"], job["revision"], grant.starts)
        ctx.store.add_event(job["run_id"], "redelivered", f"delivery {grant.starts} takes the "
                            "job over; committed calls replay", revision=job["revision"])
    try:
        return _run(ctx, job, grant.starts, resumes)
    except (StoreUnavailable, RevisionNotRunning):
        raise  # queued again (its revision is still running), or a stale delivery
    except (SystemExit, KeyboardInterrupt):
        # The worker is being stopped (its supervisor signalled the process group, as honcho
        # and Ctrl-C do): that is no failure of the run. Its job goes back to the queue
        # (rejected as its worker is lost) and resumes where it stood, as after a kill.
        log.warning("job %s of run %s interrupted: its worker is stopping; it resumes on "
                    "the next sandbox worker", job["job_id"], job["run_id"])
        raise
    except BaseException as exc:
        # Leave a visible state, then let Celery see the error (``run_leased`` releases
        # the lease, so an operator's resubmission is not mistaken for a duplicate).
        message = exc.message if isinstance(exc, ReviseError) else repr(exc)
        try:
            _fail(ctx, job, resumes, f"the sandbox job failed: {message}")
        except StoreUnavailable as unavailable:
            # Nothing true can be written now: the revision's lease expires instead and
            # the reconciler marks it lost (never a state the store did not take).
            log.warning("run %s revision %s: %s; its lease expires and the reconciler "
                        "marks it", job["run_id"], job["revision"], unavailable.message)
        raise


def _run(ctx: WorkerContext, job: dict[str, Any], delivery: int, resumes: int) -> RunReport:
    envelope = Envelope.model_validate(job["envelope"])
    transport = Transport(ctx.broker_redis)
    run_id, revision = job["run_id"], job["revision"]
    pipeline = Pipeline(
        store=ctx.store, runner=ctx.runner, settings=ctx.settings,
        executor_for=lambda env: RemoteExecutor(
            app=app, routing=ctx.routing, job_id=job["job_id"], run_id=run_id,
            revision=revision, store=ctx.store, heartbeats=ctx.heartbeats,
            claimer=Claimer(store=ctx.store, envelope=env, settings=ctx.settings,
                            owner=current_owner()),
            doorbell=ctx.doorbell, wait_seconds=ctx.queue.capability_wait_seconds,
            transport=transport, brokers=ctx.brokers,
            lease_seconds=ctx.settings.attempt_lease_seconds, chunk=ctx.queue.wave_chunk,
            park=_park_rule(ctx)))
    admitted = Admitted(run_id, revision, decode_source(job["source"]), job["args_text"],
                        Admission.from_wire(job["admission"]),
                        RunReport(run_id=run_id, revision=revision))
    report = pipeline.execute(admitted, envelope, delivery=delivery, job_id=job["job_id"],
                              resumes=resumes)
    if report.status is RevisionStatus.PARKED:
        wake(ctx, app, run_id, revision)  # its calls may all be settled already
    return report


def _park_rule(ctx: WorkerContext) -> ParkRule:
    return ParkRule(after=ctx.queue.park_after_seconds,
                    under_load_after=ctx.queue.park_under_load_after_seconds,
                    demand=ctx.sandbox_load)


def _fail(ctx: WorkerContext, job: dict[str, Any], resumes: int, message: str
          ) -> RunReport | None:
    """Fail the job's revision visibly; None when this delivery turns out to be stale
    (the job moved past it: its revision is not this task's to fail)."""
    report = RunReport(run_id=job["run_id"], revision=job["revision"],
                       status=RevisionStatus.FAILED,
                       error=ErrorReport.model_validate(SandboxError(message).to_json()))
    failed = ctx.store.fail_job_revision(job["job_id"], resumes, message, report.to_json())
    return report if failed else None


def _reap(run_dir: Path, revision: int, starts: int) -> None:
    """Kill process sandboxes left by earlier deliveries of this job (they outlive their
    worker: they run in their own session). Docker sandboxes are ended by their runner's
    own timeout."""
    kill_processes_mentioning([str(run_dir / f"rev-{revision}-d{n}") + "/"
                               for n in range(1, starts)])

"""Broker workers (``-Q capabilities``): one task per capability call.

The task runs the spending half of a call (``Broker.execute``: one claim
transaction, the provider, one commit) against the SQL run store. It is
idempotent twice over:

* per task id (the job lease): a redelivered copy of a call that already
  answered returns the stored answer; a copy that arrives while the first
  still runs waits for that answer; a call whose worker keeps dying stops
  after ``max_deliveries`` starts;
* per identity: concurrent duplicates under different task ids take the
  identity's exclusive lease one after the other, so the second finds the
  first's commit and replays it; the store's atomic attempt claim (exactly one
  pending attempt per identity) stays the last line if Redis is bypassed.

A message that is not a valid ``CapabilityCall`` (``workers.messages``) is
answered at once, outcome ``failed`` with an ``InvalidMessage`` error: no lease,
no store, no provider.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_ready

from broker.artifact_spool import SpoolingArtifactStore
from broker.calls import CallReport, CallRequest, Outcome
from broker.catalog import CAPABILITY_NAMES
from broker.envelope import Envelope
from broker.errors import (
    AttemptInFlight,
    AttemptUnresolved,
    InputError,
    SafetyStop,
    StoreUnavailable,
)
from broker.identity import Identity
from workers.app import ReviseTask, app
from workers.lease import Verdict
from workers.messages import CapabilityCall, InvalidMessage, name_in, parse_message
from workers.outcome import CallFailed, call_outcome
from workers.recovery import count_stale_delivery
from workers.routing import CAPABILITY_TASK

_limits = app.queue_settings


@app.task(name=CAPABILITY_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          throws=(CallFailed,), time_limit=_limits.capability_time_limit)
def capability(self: ReviseTask, request_wire: dict[str, Any], envelope_wire: dict[str, Any],
               origin: Any = None) -> dict[str, Any]:
    """``origin`` tags the asker (a sandbox job's delivery); the answer carries it.

    A call that got no committed result (failed, denied, diverged, stopped) raises its
    answer as ``CallFailed``: the task is FAILURE in Flower, the asker reads the answer."""
    answer = _answer(self, request_wire, envelope_wire, origin)
    failed = call_outcome(answer, name_in(request_wire, "run_id", "run id"))
    if failed is not None:
        raise failed
    return answer


def _answer(self: ReviseTask, request_wire: dict[str, Any], envelope_wire: dict[str, Any],
            origin: Any) -> dict[str, Any]:
    try:
        parse_message(CapabilityCall, {"request": request_wire, "envelope": envelope_wire,
                                       "origin": origin}, "capability call")
    except InvalidMessage as exc:
        return _refused(request_wire, exc)
    request = CallRequest.from_wire(request_wire)
    try:
        return _call(self, request, envelope_wire, origin)
    except _StoreAway as away:
        # Nothing was paid: the call goes back to the queue (same id) for when the store
        # answers, and the sandbox job waiting on it keeps waiting.
        raise self.retry(countdown=2.0, max_retries=150, exc=away.cause) from None


class _StoreAway(Exception):
    def __init__(self, cause: StoreUnavailable) -> None:
        super().__init__(cause.message)
        self.cause = cause


def _call(self: ReviseTask, request: CallRequest, envelope_wire: dict[str, Any],
          origin: Any) -> dict[str, Any]:
    ctx = self.context
    job_id = self.request.id
    try:
        revision = ctx.store.get_revision(request.run_id, request.revision)
    except StoreUnavailable as exc:
        raise _StoreAway(exc) from None
    if revision is None or revision.status != "running":
        # A redelivery for a finished revision: nobody waits for it; acknowledge it at
        # once (no lease, no provider) and count it.
        count_stale_delivery(ctx, request.run_id, request.revision, "capability call")
        return _stopped(request, AttemptInFlight(
            f"stale delivery of the call at {request.identity}: revision "
            f"{request.revision} of run {request.run_id} is no longer running",
            identity=str(request.identity)))
    grant = ctx.lease.begin(job_id, wait=ctx.queue.lease_seconds * 1.5)
    if grant.verdict is Verdict.DONE:
        return grant.answer
    if grant.verdict is Verdict.DUPLICATE:
        found = ctx.lease.wait_answer(job_id, ctx.queue.capability_time_limit)
        if found is not None:
            return found[0]
        return _stopped(request, AttemptInFlight(
            f"call {request.identity} is still running in another worker ({grant.holder})",
            identity=str(request.identity)))
    if grant.verdict is Verdict.GIVE_UP:
        answer = _stopped(request, AttemptUnresolved(
            f"gave up after {grant.starts - 1} deliveries of the call at {request.identity}: "
            "its worker died each time. Check `revise attempts --unresolved`",
            identity=str(request.identity)))
        ctx.lease.finish(grant, answer)
        return answer
    try:
        with ctx.lease.hold(grant), ctx.lease.exclusive(
                f"call:{request.run_id}:{request.identity}", ctx.queue.capability_time_limit):
            report = ctx.broker(Envelope.model_validate(envelope_wire)).execute(request)
    except BaseException:
        ctx.lease.release(grant)  # an unexpected error: let a redelivery decide again
        raise
    if isinstance(ctx.artifacts, SpoolingArtifactStore) and ctx.artifacts.pending():
        ctx.drain_spool_in_background()  # artifact bytes kept while their store was away
    if isinstance(report.stop, StoreUnavailable):
        if report.stop.fields.get("spool"):
            ctx.drain_spool_in_background()  # the paid result waits in the spool
        elif not report.attempted:
            ctx.lease.release(grant, counted=False)
            raise _StoreAway(report.stop)
    answer = report.to_wire() | {"origin": origin}
    ctx.lease.finish(grant, answer)
    return answer


@worker_ready.connect
def on_broker_worker_start(sender: Any = None, **_: Any) -> None:
    """A broker worker's first duty after a restart: commit the paid results its host's
    spool kept while the store did not answer (in the background: the store may still
    be away). Then it says it is alive, for sandbox jobs waiting on queued calls."""
    consumer_app = getattr(sender, "app", None)
    if consumer_app is not app or app.routing.queue("capabilities") not in (
            app.amqp.queues.consume_from or {}):
        return
    ctx = app.tasks[CAPABILITY_TASK].context
    ctx.drain_spool_in_background()
    name = getattr(sender, "hostname", None) or "broker"
    ctx.brokers.keep_beating(name, ctx.settings.attempt_lease_seconds / 3)


def _refused(request_wire: Any, exc: InvalidMessage) -> dict[str, Any]:
    """The answer to a malformed call: nothing was attempted. ``failed``, not ``stopped``:
    a stop without a safety-stop error would read as a success on the asking side."""
    wire = request_wire if isinstance(request_wire, dict) else {}
    identity, capability = wire.get("identity"), wire.get("capability")
    try:  # echo only what is well-formed, never the hostile part
        identity = str(Identity.parse(identity))
    except (InputError, AttributeError, TypeError):
        identity = None
    capability = capability if capability in CAPABILITY_NAMES else None
    return {"identity": identity, "capability": capability, "outcome": str(Outcome.FAILED),
            "result": None, "error": exc.to_json(), "stop": None, "attempted": False,
            "cost": 0.0, "warnings": [], "origin": None}


def _stopped(request: CallRequest, stop: SafetyStop) -> dict[str, Any]:
    return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                      error=stop.to_json()).to_wire() | {"origin": None}

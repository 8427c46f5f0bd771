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
"""

from __future__ import annotations

from typing import Any

from broker.calls import CallReport, CallRequest, Outcome
from broker.envelope import Envelope
from broker.errors import AttemptInFlight, AttemptUnresolved, SafetyStop
from workers.app import ReviseTask, app
from workers.lease import Verdict
from workers.routing import CAPABILITY_TASK

_limits = app.queue_settings


@app.task(name=CAPABILITY_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          time_limit=_limits.capability_time_limit)
def capability(self: ReviseTask, request_wire: dict[str, Any], envelope_wire: dict[str, Any],
               origin: Any = None) -> dict[str, Any]:
    """``origin`` tags the asker (a sandbox job's delivery); the answer carries it."""
    ctx = self.context
    request = CallRequest.from_wire(request_wire)
    job_id = self.request.id
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
    answer = report.to_wire() | {"origin": origin}
    ctx.lease.finish(grant, answer)
    return answer


def _stopped(request: CallRequest, stop: SafetyStop) -> dict[str, Any]:
    return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                      error=stop.to_json()).to_wire() | {"origin": None}

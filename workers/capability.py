"""Broker workers (``-Q capabilities``): one task per wave of new calls.

The task runs the spending half of a wave (``Broker.execute_wave``: one claim
transaction for its calls, the provider for each claimed one, one commit per
result) against the SQL run store. The sandbox job asking sends the new calls
of one wave together (``workers.remote``; a single call is a wave of one).

It is idempotent twice over:

* per identity, in the store: the claim transaction finds a committed slot
  (replayed), this revision's failed attempt (answered again), an open attempt
  of a live owner (waited for, then replayed) or a revision that is no longer
  running (a stale delivery: acknowledged, nothing spent). Concurrent duplicates
  under any task id meet there, so the provider runs once per identity;
* per task id (the job lease, ``workers.lease.run_leased``, not exclusive): a
  redelivered copy of an answered task returns the stored answer.

A call whose broker worker keeps dying is bounded by the store too: its open
attempt becomes unresolved, which stops a side-effecting call at once and lets a
read-only one be retried a few times (``broker.dispatch``).

A message that is not a valid ``CapabilityCall`` (``workers.messages``) is
answered at once, outcome ``failed`` with an ``InvalidMessage`` error: no lease,
no store, no provider.
"""

from __future__ import annotations

from typing import Any

from celery.signals import worker_ready

from broker.artifact_spool import SpoolingArtifactStore
from broker.calls import CallRequest, Outcome
from broker.catalog import CAPABILITY_NAMES
from broker.errors import InputError, RevisionNotRunning, StoreUnavailable
from broker.identity import Identity
from workers.app import ReviseTask, app
from workers.context import WorkerContext
from workers.lease import run_leased
from workers.messages import (
    WAVE_CALLS,
    CapabilityCall,
    InvalidMessage,
    name_in,
    parse_message,
)
from workers.outcome import CallFailed, wave_outcome
from workers.parking import wake
from workers.recovery import count_stale_delivery
from workers.routing import CAPABILITY_TASK

_limits = app.queue_settings


# track_started=False: nobody waits for a capability task's STARTED state (its asker
# watches the store), and writing it was a Redis write and publish per wave.
@app.task(name=CAPABILITY_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          throws=(CallFailed,), time_limit=_limits.capability_time_limit,
          track_started=False)
def capability(self: ReviseTask, requests_wire: list[dict[str, Any]],
               envelope_wire: dict[str, Any], origin: Any = None) -> dict[str, Any]:
    """``origin`` tags the asker (a sandbox job's delivery); the answer carries it.

    The answer is ``{"reports": [CallReport wire, ...], "origin"}``. A wave in which a
    call got no committed result (failed, denied, diverged, stopped) raises the answer
    as ``CallFailed``: the task is FAILURE in Flower, the asker reads the answer."""
    answer = _answer(self, requests_wire, envelope_wire, origin)
    first = requests_wire[0] if isinstance(requests_wire, list) and requests_wire else None
    failed = wave_outcome(answer, name_in(first, "run_id", "run id"))
    if failed is not None:
        raise failed
    return answer


def _answer(self: ReviseTask, requests_wire: Any, envelope_wire: Any, origin: Any
            ) -> dict[str, Any]:
    try:
        parse_message(CapabilityCall, {"requests": requests_wire, "envelope": envelope_wire,
                                       "origin": origin}, "capability call")
    except InvalidMessage as exc:
        return _refused(requests_wire, exc)
    requests = [CallRequest.from_wire(wire) for wire in requests_wire]
    ctx = self.context
    try:
        return run_leased(ctx.lease, self.request.id, exclusive=False,
                          uncounted=(_StoreAway,),
                          run=lambda _: _spend(ctx, requests, envelope_wire, origin))
    except _StoreAway as away:
        # Nothing was paid: the wave goes back to the queue (same id) for when the store
        # answers, and the sandbox job waiting on it keeps waiting.
        raise self.retry(countdown=2.0, max_retries=150, exc=away.cause) from None


class _StoreAway(Exception):
    def __init__(self, cause: StoreUnavailable) -> None:
        super().__init__(cause.message)
        self.cause = cause


def _spend(ctx: WorkerContext, requests: list[CallRequest], envelope_wire: dict[str, Any],
           origin: Any) -> dict[str, Any]:
    # Grants, budget, approvals and the ledger policy are the revision's stored envelope:
    # the message's copy is checked for shape only (a Redis writer could forge it).
    try:
        envelope = ctx.stored_envelope(requests[0].run_id, requests[0].revision)
    except StoreUnavailable as exc:
        raise _StoreAway(exc) from None
    broker = ctx.broker(envelope)
    try:
        reports = list(broker.execute_wave(requests))
    finally:
        broker.close()
    if isinstance(ctx.artifacts, SpoolingArtifactStore) and ctx.artifacts.pending():
        ctx.drain_spool_in_background()  # artifact bytes kept while their store was away
    if any(report.attempted for report in reports):
        wake(ctx, app, requests[0].run_id, requests[0].revision)  # its job may be parked
    for report in reports:
        if isinstance(report.stop, RevisionNotRunning):
            # A redelivery for a finished revision: nobody waits for it; acknowledged at
            # once (nothing was claimed or paid) and counted.
            count_stale_delivery(ctx, requests[0].run_id, requests[0].revision,
                                 "capability call")
        elif isinstance(report.stop, StoreUnavailable):
            if report.stop.fields.get("spool"):
                ctx.drain_spool_in_background()  # the paid result waits in the spool
            elif not report.attempted and not any(r.attempted for r in reports):
                raise _StoreAway(report.stop)
    return {"reports": [report.to_wire() for report in reports], "origin": origin}


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


def _refused(requests_wire: Any, exc: InvalidMessage) -> dict[str, Any]:
    """The answer to a malformed wave: nothing was attempted. ``failed``, not ``stopped``:
    a stop without a safety-stop error would read as a success on the asking side."""
    wires = (requests_wire if isinstance(requests_wire, list) else [requests_wire]) or [None]
    return {"reports": [_refused_one(wire, exc) for wire in wires[:WAVE_CALLS]],
            "origin": None}


def _refused_one(wire: Any, exc: InvalidMessage) -> dict[str, Any]:
    wire = wire if isinstance(wire, dict) else {}
    identity, capability = wire.get("identity"), wire.get("capability")
    try:  # echo only what is well-formed, never the hostile part
        identity = str(Identity.parse(identity))
    except (InputError, AttributeError, TypeError):
        identity = None
    capability = capability if capability in CAPABILITY_NAMES else None
    return {"identity": identity, "capability": capability, "outcome": str(Outcome.FAILED),
            "result": None, "error": exc.to_json(), "stop": None, "attempted": False,
            "cost": 0.0, "warnings": []}

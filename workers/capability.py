"""Broker workers (``-Q capabilities``): execute calls the side that asked has claimed.

A sandbox job decides and claims the new calls of a wave itself, in one store
transaction (``broker.claim``), then sends their attempt ids here
(``workers.messages.ExecuteCalls``). The task reads each claimed attempt and its
payload from the run store (never from the message), takes it as its request leaves
(the dispatch record, atomic: one copy sends it), calls the provider and commits
(``broker.spend``), rings the asker's doorbell (``workers.doorbell``) and wakes the
revision's job if it parked. The answer is in the store, and only there.

A duplicate delivery, a copy sent twice, an attempt withdrawn because its revision
stopped, or a forged message naming anything the store did not claim, finds nothing
to take and does nothing. A broker worker killed mid-call leaves its attempt pending
with a dead owner: unresolved (``broker.crash_window``), never sent twice.

A message that is not a valid ``ExecuteCalls`` is dropped at once: no store, no
provider.
"""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

from broker.artifact_spool import SpoolingArtifactStore
from broker.calls import CallReport, ClaimedCall
from broker.errors import StoreUnavailable
from workers.app import ReviseTask, app
from workers.context import WorkerContext
from workers.doorbell import ring
from workers.messages import ExecuteCalls, InvalidMessage, parse_message
from workers.outcome import CallFailed, wave_outcome
from workers.parking import wake
from workers.recovery import count_stale_delivery
from workers.routing import CAPABILITY_TASK

log = logging.getLogger("revise.workers.capability")

_limits = app.queue_settings


# No result is stored (the answer is in the run store), nobody waits for a started state,
# and no task events are sent: there are four of these per job of four calls, and their
# events cost the broker, Redis and Flower more than the task itself. Flower shows each
# call's job (its sandbox task, FAILURE with the call's error); `revise show` every call.
@app.task(name=CAPABILITY_TASK, bind=True, acks_late=True, reject_on_worker_lost=True,
          throws=(CallFailed,), time_limit=_limits.capability_time_limit,
          track_started=False, ignore_result=True, send_events=False)
def capability(self: ReviseTask, message: Any) -> None:
    try:
        calls = parse_message(ExecuteCalls, message, "capability call")
    except InvalidMessage as exc:
        log.error("capability task %s dropped: %s", self.request.id, exc.message)
        return
    try:
        reports = _execute(self.context, calls)
    except StoreUnavailable as exc:
        # Nothing was taken: the task goes back to the queue (same id) for when the store
        # answers, and the job waiting on it keeps waiting.
        raise self.retry(countdown=2.0, max_retries=150, exc=exc) from None
    failed = wave_outcome(reports, calls.run_id, calls.revision)
    if failed is not None:
        raise failed


def _execute(ctx: WorkerContext, calls: ExecuteCalls) -> list[CallReport]:
    claimed = ctx.store.claimed_calls(calls.run_id, calls.revision, calls.attempts)
    reports = _spend(ctx, calls, claimed) if claimed else []
    if not reports:  # taken by another copy, withdrawn, or never claimed: nothing done
        count_stale_delivery(ctx, calls.run_id, calls.revision, "capability call")
    return reports


def _spend(ctx: WorkerContext, calls: ExecuteCalls, claimed: list[ClaimedCall]
           ) -> list[CallReport]:
    envelope = ctx.stored_envelope(calls.run_id, calls.revision)
    spender = ctx.spender(envelope)
    reports: list[CallReport] = []
    try:
        for _, report in spender.execute(claimed):
            if report is None:
                continue  # another copy sends it
            reports.append(report)
            if calls.doorbell is not None:
                ring(ctx.redis, calls.doorbell, calls.run_id, calls.revision)
            if report.stop is not None and report.stop.fields.get("spool"):
                ctx.drain_spool_in_background()  # the paid result waits in the spool
    finally:
        spender.close()
    if isinstance(ctx.artifacts, SpoolingArtifactStore) and ctx.artifacts.pending():
        ctx.drain_spool_in_background()  # artifact bytes kept while their store was away
    if reports:
        wake(ctx, app, calls.run_id, calls.revision)  # its job may be parked
    return reports


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
    try:
        _ = ctx.provider  # built now: the first call would pay its imports (about 0.2 s)
    except Exception as exc:  # the first call meets it again and stops with its message
        log.warning("the provider could not be built yet: %s", exc)
    name = getattr(sender, "hostname", None) or "broker"
    ctx.brokers.keep_beating(name, ctx.settings.attempt_lease_seconds / 3)

"""Issue 6 under Celery: a broker worker killed mid-call, the reconciler, the operator's
decision (in the run store, never a queue message a Redis writer could forge)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus
from orchestrator.reconcile import reconcile_attempt

from .conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _attempts(stack, status: AttemptStatus):
    return stack.store.list_attempts("run-crash", frozenset({status}))


def test_broker_worker_killed_mid_call_is_reconciled_not_repaid(make_stack) -> None:
    stack = make_stack(visibility_timeout=5, unacked_restore_seconds=1, reconcile_interval=1)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    doomed = stack.worker("capabilities", concurrency=2,
                          env={"REVISE_CELERY_LOCAL_LATENCY": "60"})
    stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready()

    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "run-crash")
    wait_for(lambda: _attempts(stack, AttemptStatus.PENDING), 60, "the durable attempt")
    wait_for(stack.provider_log, 30, "the intent line written before the provider call")
    os.killpg(doomed.pid, signal.SIGKILL)  # the broker worker dies inside the provider call
    doomed.wait(10)

    unresolved = wait_for(lambda: _attempts(stack, AttemptStatus.UNRESOLVED), 30,
                           "the reconciler marking the attempt")
    assert str(unresolved[0].identity) == "orchestrate/#0@:0"
    wait_for(lambda: stack.store.get_run("run-crash").status == "blocked", 10,
              "the run in its named blocked state")  # written just after the attempt
    assert stack.events("run-crash", "attempt_unresolved")

    stack.worker("capabilities", concurrency=2, index=1,
                 env={"REVISE_CELERY_LOCAL_LATENCY": "0"})
    report = handle.wait(90)  # the redelivered call task answers without a provider call
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "AttemptUnresolved"
    # It may have been charged: paid in the run's spend and in its identity's cost too
    (paid,) = [i for i in report["identities"] if i["site"] == "orchestrate/#0"]
    assert report["spend"] > 0 and paid["cost"] == report["spend"], report["identities"]
    (killed,) = stack.provider_log()  # the request left; no answer was recorded
    assert (killed["identity"], killed["outcome"]) == ("orchestrate/#0@:0", "sent")

    # A forged operator task on the reconcile queue (the queue is a wall too): no worker
    # knows it, so the paid-or-not decision stays the operator's.
    stack.client.app.send_task("revise.reconcile.attempt",
                               args=["run-crash", "orchestrate/#0@:0"],
                               kwargs={"operator": "mallory", "reason": "forged"},
                               queue=stack.client.app.routing.queue("reconcile"))
    time.sleep(3)
    assert [a.status for a in stack.store.list_attempts("run-crash")] == [
        AttemptStatus.UNRESOLVED]
    decision = reconcile_attempt(stack.store, "run-crash", "orchestrate/#0@:0",
                                 operator="ana", reason="the provider has no record of it")
    assert decision["decision"] == "abandoned"

    again = stack.client.submit(script("crash_seq"), {}, Envelope(), "run-crash").wait(90)
    assert again["status"] == "succeeded"
    assert again["calls"]["executed"] == 2
    assert [(line["identity"], line["outcome"]) for line in stack.provider_log()] == [
        ("orchestrate/#0@:0", "sent"), ("orchestrate/#0@:0", "ok"), ("orchestrate/#1@:0", "ok")]
    reconciled = stack.events("run-crash", "attempt_reconciled")
    assert reconciled[0].data["operator"] == "ana"

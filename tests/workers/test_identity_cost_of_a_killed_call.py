"""A call whose broker worker is SIGKILLed inside the provider call, through the queue:
its request left (the dispatch record and the provider log say so), so it may have been
charged and counts as paid until an operator says otherwise. The revision's report must
say so for that call too: its identity's ``cost`` is the price, as it is for a call that
failed uncertain, and the identities' costs add up to the report's ``spend``."""

from __future__ import annotations

import os
import signal

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus

from .conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_call_killed_in_flight_is_paid_in_its_identity_s_cost(make_stack) -> None:
    stack = make_stack(visibility_timeout=5, unacked_restore_seconds=1, reconcile_interval=1)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    doomed = stack.worker("capabilities", concurrency=2,
                          env={"REVISE_CELERY_LOCAL_LATENCY": "60"})
    stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready()
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "run-paid")
    wait_for(lambda: stack.store.list_attempts("run-paid", frozenset({AttemptStatus.PENDING})),
             60, "the durable attempt")
    wait_for(stack.provider_log, 30, "the intent line written before the provider call")
    os.killpg(doomed.pid, signal.SIGKILL)
    doomed.wait(10)
    stack.worker("capabilities", concurrency=2, index=1,
                 env={"REVISE_CELERY_LOCAL_LATENCY": "0"})
    report = handle.wait(90)
    assert report["error"]["type"] == "AttemptUnresolved", report["error"]
    assert report["spend"] > 0, report  # the sent request counts as paid in the run
    (killed,) = [i for i in report["identities"] if i["site"] == "orchestrate/#0"]
    assert killed["cost"] == report["spend"], report["identities"]

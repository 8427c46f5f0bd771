"""The fault suite with parked jobs (issue 26, item 5): every job parks at every wave
(its sandbox and slot given back while its calls are in flight at broker workers, then
resumed, the admitted script run again and its committed calls replayed), and a fault
hits while jobs are parked: PostgreSQL restarted (results committed while the store was
away: the broker's spool, then the wake), Redis restarted empty (the resume messages and
the doorbells gone with it), every role SIGKILLed. The same invariants as
``test_faults``: 0 duplicate paid calls, 0 lost paid results, 0 runs left running, every
certificate verifies, a new job succeeds."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from .conftest import FaultStack
from .test_faults import _mid_run, _settle, _submit

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(600)]

PARK_AT_ONCE = {"REVISE_CELERY_PARK_AFTER_SECONDS": "0.2"}


@pytest.fixture(scope="module")
def parked_stack(tmp_path_factory: pytest.TempPathFactory, private_services: Any
                 ) -> Iterator[FaultStack]:
    postgres, redis = private_services
    built = FaultStack(tmp_path_factory.mktemp("parked"), postgres, redis,
                       database="revise_faults_parked", role_env={"sandbox": PARK_AT_ONCE})
    try:
        built.start_roles()
        yield built
    finally:
        built.stop()


def _parked(stack: FaultStack, name: str) -> int:
    """How many times the fault's jobs parked (each job parks at each wave)."""
    return sum(1 for i in range(10) for e in stack.store.list_events(f"{name}-{i}")
               if e.kind == "parked")


def _postgres_restarted(stack: FaultStack) -> None:
    stack.postgres.stop()
    time.sleep(7)
    stack.postgres.start()


def _redis_restarted_empty(stack: FaultStack) -> None:
    stack.redis.kill()
    time.sleep(2)
    stack.redis.start()


def _every_role_sigkilled(stack: FaultStack) -> None:
    """Then the operator starts the stack again."""
    for proc in stack.procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in stack.procs:
        proc.wait(30)
    stack.restart_roles()


@pytest.mark.parametrize(("name", "fault"), [("ppg", _postgres_restarted),
                                             ("predis", _redis_restarted_empty),
                                             ("pkill", _every_role_sigkilled)])
def test_a_fault_while_jobs_are_parked(parked_stack: FaultStack, name: str,
                                       fault: Callable[[FaultStack], None]) -> None:
    handles = _submit(parked_stack, name)
    _mid_run(parked_stack, name)
    fault(parked_stack)
    _settle(parked_stack, handles, time.monotonic(), name)
    assert _parked(parked_stack, name) > 0

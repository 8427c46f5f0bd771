"""Faults lose nothing (issue 17): the Procfile's roles on a private PostgreSQL and Redis,
concurrent fanout jobs, one fault injected mid-run each.

Required after every fault: 0 duplicate paid calls, 0 lost paid results, 0 runs left
`running` after the sweep, every certificate verifies, and a new job succeeds without
restarting workers. Each test prints its time to recovery (fault repaired -> every run
settled and a new job succeeded).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus, RunStatus
from orchestrator.certificate import verify
from orchestrator.reconcile import reconcile_attempt, result_from_log
from workers.outcome import answer_of
from workers.routing import SANDBOX_TASK

from ..workers.conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(600)]

JOBS = 10
SHOTS = 8
SCRIPT = script("fault_fanout")


class Waiting:
    """A client per job waiting in its own thread while the fault happens."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.report: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.progress: list[str] = []
        self.thread = threading.Thread(target=self._wait, daemon=True)
        self.thread.start()

    def _wait(self) -> None:
        try:
            self.report = self.handle.wait(240, progress=self.progress.append)
        except BaseException as exc:  # reported by the test, with the job
            self.error = exc

    def result(self) -> dict[str, Any]:
        self.thread.join(250)
        assert self.error is None, f"{self.handle.run_id}: the client failed: {self.error!r}"
        assert self.report is not None, f"{self.handle.run_id}: no answer"
        return self.report


def _submit(stack: Any, name: str) -> dict[str, Waiting]:
    return {f"{name}-{i}": Waiting(stack.client.submit(
        SCRIPT, {"shots": [f"{name} {i} shot {k}" for k in range(SHOTS)]}, Envelope(),
        f"{name}-{i}")) for i in range(JOBS)}


_TELLING = ("commit_recovered", "attempt_unresolved", "revision_lost", "job_requeued",
            "stale_delivery", "redelivered", "ledger_rebuilt", "ledger_entry_missing")


def _paid_so_far(stack: Any, name: str) -> int:
    return sum(1 for line in _answered(stack) if line["run_id"].startswith(name))


def _answered(stack: Any) -> list[dict[str, Any]]:
    """Dispatches the provider answered. One killed mid-call (its intent line, no answer)
    did no work at the local provider: the operator's check finds nothing and abandons it
    (``_reconcile_open_attempts``), so its re-execution is not a second payment."""
    return [line for line in stack.provider_log() if line["outcome"] != "sent"]


def _settle(stack: Any, handles: dict[str, Any], fixed_at: float, name: str) -> None:
    """Wait out every run (clients wait through the outage), resume what a fault stopped
    the way an operator would, then check the invariants and a new job. No worker may
    have died of the fault: nobody restarts them."""
    assert stack.dead_roles() == [], f"workers died: logs in {stack.tmp_path}"
    reports = {run_id: waiting.result() for run_id, waiting in handles.items()}
    progress = [line for waiting in handles.values() for line in waiting.progress]
    wait_for(lambda: not [r for r in handles if stack.store.get_run(r).status ==
                          RunStatus.RUNNING], 120, "no run left running")
    settled = time.monotonic() - fixed_at
    first = dict(reports)
    resumed = [run_id for run_id, report in reports.items() if report["status"] != "succeeded"]
    for run_id in resumed:
        _reconcile_open_attempts(stack, run_id)
        report = stack.client.submit(SCRIPT, _args(stack, run_id), Envelope(),
                                     run_id).wait(180)
        assert report["status"] == "succeeded", (run_id, report["error"])
        reports[run_id] = report
    probe = stack.client.submit(SCRIPT, {"shots": [f"{name} probe {k}" for k in range(SHOTS)]},
                                Envelope(), f"{name}-probe").wait(180)
    assert probe["status"] == "succeeded", probe["error"]
    assert stack.dead_roles() == [], f"workers died: logs in {stack.tmp_path}"
    recovered = time.monotonic() - fixed_at
    _check_invariants(stack, [*handles, f"{name}-probe"])
    kinds = Counter(e.kind for run_id in handles for e in stack.store.list_events(run_id))
    print(f"\nFAULT {name}: runs settled {settled:.1f} s and a new job succeeded "
          f"{recovered:.1f} s after the fault was repaired; {len(resumed)} of {JOBS} runs "
          f"resumed by resubmission; first outcomes "
          f"{dict(Counter(r['status'] for r in first.values()))} "
          f"{sorted({r['error']['type'] for r in first.values() if r['error']})}; paid calls "
          f"{_paid_so_far(stack, name)}; events " + ", ".join(
              f"{k}={kinds[k]}" for k in _TELLING if kinds[k])
          + f"; client progress lines {len(progress)}"
          + (f", e.g. {progress[0]!r}" if progress else ""))


def _args(stack: Any, run_id: str) -> Any:
    """The run's args as its first revision received them (what resubmission reuses)."""
    digest = stack.store.list_revisions(run_id)[0].args_digest
    return json.loads(stack.store.get_blobs(run_id, [digest])[digest])


def _reconcile_open_attempts(stack: Any, run_id: str) -> None:
    """The operator's step for a blocked run: a paid call is written back from the
    provider log, an unpaid one abandoned (never `--abandon` for a paid call)."""
    log_path = stack.settings.provider_log_path
    for attempt in stack.store.list_attempts(run_id, frozenset({AttemptStatus.UNRESOLVED})):
        paid = [line for line in stack.provider_log() if line["run_id"] == run_id
                and line["identity"] == str(attempt.identity) and line["outcome"] == "ok"]
        if paid:
            result = result_from_log(stack.store, log_path, run_id, attempt.identity)
            reconcile_attempt(stack.store, run_id, attempt.identity, result=result,
                              operator="test", reason="the provider log has it")
        else:
            reconcile_attempt(stack.store, run_id, attempt.identity, operator="test",
                              reason="the provider log has no record of it")


def _check_invariants(stack: Any, run_ids: list[str]) -> None:
    lines = [line for line in _answered(stack) if line["run_id"] in run_ids]
    paid = Counter((line["run_id"], line["identity"]) for line in lines)
    duplicates = {key: n for key, n in paid.items() if n > 1}
    assert duplicates == {}, f"duplicate paid calls: {duplicates}"
    lost = []
    for line in lines:
        slots = {str(s.identity): s for s in stack.store.list_slots(line["run_id"])}
        slot = slots.get(line["identity"])
        if line["outcome"] == "ok" and (slot is None or slot.result != line["result"]):
            lost.append((line["run_id"], line["identity"]))
    assert lost == [], f"paid results not committed: {lost}"
    # A call committed when the event was written must never read "not dispatched" (a
    # later revision may commit a call an earlier one was truly stopped before).
    untrue = []
    for run_id in run_ids:
        committed = {str(s.identity): s.committed_at for s in stack.store.list_slots(run_id)}
        untrue += [(e.run_id, e.identity) for e in stack.store.list_events(run_id)
                   if "not dispatched" in e.message and e.identity in committed
                   and committed[e.identity] is not None
                   and committed[e.identity] <= e.created_at]
    assert untrue == [], f"events say 'not dispatched' for committed calls: {untrue}"
    running = [r for r in run_ids if stack.store.get_run(r).status == RunStatus.RUNNING]
    assert running == [], f"runs left running: {running}"
    for run_id in run_ids:
        persisted = stack.store.latest_certificate(run_id)
        assert persisted is not None, run_id
        check = verify(persisted.digest, persisted.entries, stack.store.list_slots(run_id))
        assert not check.differences, (run_id, check.differences)


def _mid_run(stack: Any, name: str) -> None:
    wait_for(lambda: _paid_so_far(stack, name) >= 3, 120, f"{name}: the first paid calls")


def test_postgres_restarted_mid_run(stack: Any) -> None:
    handles = _submit(stack, "pg7")
    _mid_run(stack, "pg7")
    stack.postgres.stop()
    time.sleep(7)
    stack.postgres.start()
    _settle(stack, handles, time.monotonic(), "pg7")


def test_postgres_down_62_seconds(stack: Any) -> None:
    """Longer than a minute, as in the issue's report: several attempt and revision
    lease periods (10 s here) pass while nobody can write a heartbeat."""
    handles = _submit(stack, "pg62")
    _mid_run(stack, "pg62")
    stack.postgres.stop()
    time.sleep(62)
    stack.postgres.start()
    _settle(stack, handles, time.monotonic(), "pg62")


def test_redis_restarted_losing_everything(stack: Any) -> None:
    handles = _submit(stack, "redis")
    _mid_run(stack, "redis")
    stack.redis.kill()
    time.sleep(2)
    stack.redis.start()
    _settle(stack, handles, time.monotonic(), "redis")


def test_redis_flapping(stack: Any) -> None:
    """Redis dies again and again within seconds: every worker process survives and
    consumes again (a flap once killed a broker worker: a task finishing after the
    reconnect acknowledged on its released channel; see ``workers.kombu_redis``)."""
    handles = _submit(stack, "flap")
    _mid_run(stack, "flap")
    for gap in (0.3, 1.5, 0.1, 2.5, 0.6):
        stack.redis.kill()
        time.sleep(gap)
        stack.redis.start()
        time.sleep(gap)
    _settle(stack, handles, time.monotonic(), "flap")


def test_every_worker_sigkilled_and_restarted(stack: Any) -> None:
    handles = _submit(stack, "kill")
    _mid_run(stack, "kill")
    for proc in stack.procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in stack.procs:
        proc.wait(30)
    restarted = time.monotonic()  # repaired = the operator restarts the stack
    stack.restart_roles()
    _settle(stack, handles, restarted, "kill")

    # A stale delivery of a finished revision's job is acknowledged at once and counted.
    job = next(j for j in stack.store.list_jobs(frozenset({"finished", "lost"}))
               if j.run_id.startswith("kill-"))
    # The backend still holds the first delivery's result under this task id: forget it,
    # so the answer read below is the stale copy's.
    stack.client.app.AsyncResult(f"{job.job_id}/sandbox").forget()
    sent = stack.client.app.send_task(
        SANDBOX_TASK, args=[job.message], task_id=f"{job.job_id}/sandbox",
        queue=stack.client.app.routing.queue("sandbox"))
    outcome = sent.get(60, propagate=False)
    # The copy keeps the task state its revision earned (FAILURE for a lost one).
    answer = answer_of(outcome) if sent.failed() else outcome
    assert answer is not None, outcome
    assert answer["duplicate"] is True and answer["stale_deliveries"] >= 1
    assert sent.failed() == (answer["status"] != "succeeded")
    assert stack.events(job.run_id, "stale_delivery")

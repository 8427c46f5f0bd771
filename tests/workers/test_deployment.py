"""The Celery deployment end to end: real Redis, PostgreSQL and worker subprocesses."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from broker.calls import CallRequest
from broker.catalog import CATALOG
from broker.claim import Claimer
from broker.envelope import Budget, Envelope
from broker.identity import Identity, call_digest
from broker.owner import pid_of
from broker.records import AttemptStatus
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner
from workers.routing import CAPABILITY_TASK, SANDBOX_TASK

from .conftest import script, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SHOTS = {"shots": ["a", "b", "c", "d"]}


def _embedded(tmp_path) -> list[dict[str, Any]]:
    settings = Settings(home=tmp_path / "embedded", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        return [pipeline.run("run-1", script(name), SHOTS, Envelope()).to_json()
                for name in ("fanout_v1", "fanout_repaired", "fanout_edited")]
    finally:
        services.close()


def _shape(report: dict[str, Any]) -> tuple:
    return (report["status"], report["calls"], (report["error"] or {}).get("type"),
            [c["kind"] for c in report["gate"]["counterexamples"]],
            sorted((i["site"], tuple(i["path"]), i["outcome"]) for i in report["identities"]))


def test_core_scenario_through_the_queue_matches_embedded(make_stack, tmp_path) -> None:
    stack = make_stack()
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=2)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready()

    reports = [stack.client.submit(script(name), SHOTS, Envelope(), "run-1").wait(60)
               for name in ("fanout_v1", "fanout_repaired", "fanout_edited")]
    first, repair, edited = reports
    assert first["calls"] == {"executed": 4, "succeeded": 3, "failed": 1,
                              "uncertain": 0, "replayed": 0,
                              "denied": 0}
    assert (repair["status"], repair["calls"]["replayed"], repair["calls"]["executed"]) == (
        "succeeded", 3, 1)
    assert edited["status"] == "stopped"
    assert [c["kind"] for c in edited["gate"]["counterexamples"]] == ["call_changed"]
    assert len(stack.provider_log()) == 5
    # The dispatcher stopped the edit: no sandbox ever saw revision 3.
    assert not [e for e in stack.events("run-1", "sandbox_start") if e.revision == 3]
    assert [_shape(r) for r in reports] == [_shape(r) for r in _embedded(tmp_path)]
    # A call's task leaves Celery's routine lines out of the log, not its failure's.
    calls = (stack.tmp_path / "capabilities0.log").read_text()
    assert f"{CAPABILITY_TASK}[" in calls and "raised expected" in calls
    assert not [line for line in calls.splitlines() if CAPABILITY_TASK in line
                and ("received" in line or "succeeded in" in line)]
    assert f"{SANDBOX_TASK}[" in (stack.tmp_path / "sandbox0.log").read_text()


def test_one_call_delivered_ten_times_to_two_workers_executes_once(make_stack) -> None:
    """A claimed call whose task is delivered ten times, to two broker workers at once:
    taking the attempt as its request leaves is atomic, so the provider runs once and the
    nine other copies find nothing to take."""
    stack = make_stack(local_latency=0.5)
    stack.worker("capabilities", concurrency=5, index=0)
    stack.worker("capabilities", concurrency=5, index=1)
    stack.wait_ready()
    stack.store.ensure_run("run-scale")
    revision = stack.store.add_revision("run-scale", "# source", "digest")
    payload = CATALOG["image.generate"].normalize({"prompt": "one shot", "size": "512x512"})
    request = CallRequest("run-scale", revision, Identity("orchestrate/#0", (), 0),
                          "image.generate", payload, call_digest(payload), "fp")
    claimer = Claimer(store=stack.store, envelope=Envelope(), settings=stack.settings)
    (decided,) = claimer.claim([request])
    assert decided.claimed is not None
    calls = {"run_id": "run-scale", "revision": revision,
             "attempts": [decided.claimed.attempt.id]}
    app, queue = stack.client.app, stack.client.app.routing.queue("capabilities")
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda _: app.send_task(CAPABILITY_TASK, args=[calls], queue=queue),
                      range(10)))
    stale = f"revise:{stack.prefix}stale-deliveries"
    wait_for(lambda: int(stack.context.redis.get(stale) or 0) == 9, 60,
             "nine copies that found nothing to take")
    wait_for(lambda: stack.store.get_slot("run-scale", request.identity), 60, "the commit")
    assert len(stack.provider_log()) == 1
    (attempt,) = stack.store.list_attempts("run-scale")
    assert attempt.status is AttemptStatus.SUCCEEDED and attempt.sent_at is not None
    assert stack.store.get_slot("run-scale", request.identity).digest == request.digest
    copies = [attempt.owner] + [e.data["by"] for e in stack.events("run-scale",
                                                                   "stale_delivery")]
    workers = {proc.pid for proc in stack.procs}
    assert {pid_of(owner) for owner in copies} == workers  # both workers took copies
    app.send_task(CAPABILITY_TASK, args=[calls], queue=queue)  # a redelivery, much later
    wait_for(lambda: int(stack.context.redis.get(stale) or 0) == 10, 60, "the late copy")
    assert len(stack.provider_log()) == 1


def test_sandbox_worker_killed_mid_job_replays_and_never_pays_twice(make_stack) -> None:
    stack = make_stack(local_latency=1.0)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready()

    handle = stack.client.submit(script("e3_v2"), {}, Envelope(), "run-kill")
    wait_for(lambda: stack.store.list_slots("run-kill"), 30, "the first committed call")
    job = f"{handle.job_id}/sandbox"
    holder = wait_for(lambda: stack.context.lease.holder(job), 5, "the job lease")
    pid = pid_of(holder)
    assert pid is not None, holder
    os.kill(pid, signal.SIGKILL)  # the pool process running the job
    assert not handle.done()

    report = handle.wait(60)
    assert report["status"] == "succeeded" and handle.done()
    assert stack.context.lease.starts(job) == 2
    # Both deliveries belong to one revision: its three attempts are its executions, and
    # the second delivery's replays of the first's commits are not "saved" calls.
    assert (report["calls"]["executed"], report["calls"]["replayed"]) == (3, 0)
    identities = [entry["identity"] for entry in stack.provider_log()]
    assert len(identities) == 3 and len(set(identities)) == 3  # each call paid exactly once
    assert len(stack.events("run-kill", "redelivered")) == 1


def test_job_longer_than_the_visibility_timeout_runs_once(make_stack) -> None:
    stack = make_stack(local_latency=20, visibility_timeout=5, unacked_restore_seconds=1)
    stack.env["REVISE_CELERY_PARK_AFTER_SECONDS"] = "none"  # the job itself runs long
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=2)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready()

    handle = stack.client.submit(script("keyorder_v1"), {}, Envelope(), "run-slow")
    report = handle.wait(90)
    assert report["status"] == "failed"
    assert report["error"]["type"] == "RuntimeError"
    assert report["calls"]["executed"] == 1
    assert len(stack.provider_log()) == 1
    job = f"{handle.job_id}/sandbox"
    assert stack.context.lease.starts(job) == 1
    assert stack.context.lease.duplicates(job) >= 1  # Redis did deliver it again
    assert len(stack.events("run-slow", "sandbox_start")) == 1


def test_a_wave_split_over_two_broker_workers_is_held_to_the_budget_whole(make_stack
                                                                         ) -> None:
    """16 branches whose first calls form one wave, sent as 16 tasks (one call each) to two
    broker worker processes, on a budget of 5: the wave does not fit, so none of it is paid,
    exactly as embedded (where one claim transaction decides the wave). A wave that fits is
    paid whole over the same split."""
    stack = make_stack(local_latency=0.3, wave_chunk=1)
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=8, index=0)
    stack.worker("capabilities", concurrency=8, index=1)
    stack.wait_ready()

    envelope = Envelope(budget=Budget(max_calls=5), concurrency=16)
    prompts = {"prompts": [f"shot {i}" for i in range(16)]}
    report = stack.client.submit(script("budget_wide"), prompts, envelope,
                                 "run-budget").wait(90)
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "BudgetExceeded"
    assert "none sent" in report["error"]["message"]
    assert stack.store.list_attempts("run-budget") == []
    assert stack.provider_log() == [] and report["calls"]["executed"] == 0

    fits = Envelope(budget=Budget(max_calls=16), concurrency=16)
    report = stack.client.submit(script("budget_wide"), prompts, fits, "run-fits").wait(90)
    assert report["status"] == "succeeded", report["error"]
    assert len(stack.provider_log()) == 16 and report["calls"]["executed"] == 16

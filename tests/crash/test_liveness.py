"""No revision stays `running` without a live owner (issue 17, item 2).

A revision's lease lives in the store; the sweep fails a revision whose owner is
gone with the reason named, leaves an accepted job that was never started to the
requeue sweep, and the run stays resumable: submitting it again replays.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import RunBusy
from broker.owner import current_owner
from broker.sqlstore import SqlStore
from orchestrator.embedded import open_services
from orchestrator.reconcile import (
    LOST_DISPATCHER,
    LOST_SANDBOX,
    sweep_revisions,
)
from sandbox.runner import ProcessRunner

from .kit import provider_lines, script, settings_for

_FORK = multiprocessing.get_context("fork")


def _number_and_die(url: str, run_id: str, source: str) -> None:
    store = SqlStore.open(url)
    store.add_revision(run_id, source, "digest")  # numbered, never queued: then SIGKILL
    os._exit(0)


def _say_owner(conn: Any) -> None:
    conn.send(current_owner())
    os._exit(0)


def _dead_owner() -> str:
    """The owner token of a process of this host that has exited (whatever the format)."""
    parent, child = _FORK.Pipe()
    proc = _FORK.Process(target=_say_owner, args=(child,))
    proc.start()
    token = parent.recv()
    proc.join()
    return token


def test_a_revision_numbered_by_a_dead_dispatcher_is_failed_and_the_run_resumes(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = open_services(settings_for(home), runner=ProcessRunner())
    try:
        first = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert first["status"] == "succeeded"
        proc = _FORK.Process(target=_number_and_die, args=(
            services.settings.resolved_database_url, "r", script("crash_seq")))
        proc.start()
        proc.join(60)
        assert services.store.get_revision("r", 2).status == "running"

        lost = sweep_revisions(services.store, 30.0)  # the owner is dead: no lease wait
        assert [(x.revision, x.reason) for x in lost] == [(2, LOST_DISPATCHER)]
        assert sweep_revisions(services.store, 30.0) == []  # once
        revision = services.store.get_revision("r", 2)
        assert revision.status == "failed"
        assert revision.summary["error"]["type"] == "RevisionLost"
        run = services.store.get_run("r")
        assert run.status == "failed" and run.detail.startswith("lost: the dispatcher")
        assert [e.kind for e in services.store.list_events("r")][-1] == "revision_lost"

        again = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert again["status"] == "succeeded" and again["calls"]["replayed"] == 2
    finally:
        services.close()
    assert len(provider_lines(home)) == 2


def test_a_submit_fails_a_dead_owners_revision_first_and_refuses_beside_a_live_one(
        tmp_path: Path) -> None:
    """No sweep in between: the submit itself fails the revision whose owner died, then
    runs; beside a revision whose owner lives it is refused (RunBusy), changing nothing."""
    home = tmp_path / "home"
    services = open_services(settings_for(home), runner=ProcessRunner())
    try:
        services.pipeline().run("r", script("crash_seq"), {}, Envelope())
        proc = _FORK.Process(target=_number_and_die, args=(
            services.settings.resolved_database_url, "r", script("crash_seq")))
        proc.start()
        proc.join(60)
        again = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert again["revision"] == 3 and again["status"] == "succeeded"
        assert again["calls"]["replayed"] == 2
        lost = services.store.get_revision("r", 2)
        assert lost.status == "failed" and lost.summary["error"]["type"] == "RevisionLost"

        live = services.store.add_revision("r", "src", "h")  # owned by this process
        with pytest.raises(RunBusy):
            services.pipeline().run("r", script("crash_seq"), {}, Envelope())
        assert services.store.get_revision("r", live).status == "running"
        assert services.store.get_run("r").revisions == live
    finally:
        services.close()
    assert len(provider_lines(home)) == 2


def test_started_jobs_are_lost_with_their_worker_and_accepted_ones_wait(
        tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        for run_id in ("started", "accepted"):
            store.ensure_run(run_id)
            store.add_revision(run_id, "src", "d", job=lambda number, run_id=run_id: (
                f"job-{run_id}", {"job_id": f"job-{run_id}"}))
        assert store.start_revision("started", 1, owner=_dead_owner(), job_id="job-started",
                                    event="sandbox starting", admit=lambda slots: True)
        lost = sweep_revisions(store, 30.0)
        assert [(x.run_id, x.reason) for x in lost] == [("started", LOST_SANDBOX)]
        assert store.get_job("job-started").status == "lost"
        assert store.get_job("job-accepted").status == "accepted"
        assert store.get_revision("accepted", 1).status == "running"
        # a stale delivery of the lost job finds it not running
        assert store.start_revision("started", 1, owner=current_owner(), job_id="job-started",
                                    event="sandbox starting", admit=lambda slots: True) is None
    finally:
        store.close()


def test_a_started_job_is_resumed_once_and_its_older_deliveries_are_stale(
        tmp_path: Path) -> None:
    """``resume_lost_job`` (the reconciler's step before ``sweep_revisions``) and the start
    of a delivery are fenced on the job row: exactly one of them goes on."""
    store = SqlStore.open(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        store.ensure_run("r")
        store.add_revision("r", "src", "d", job=lambda number: ("job", {"job_id": "job"}))
        assert store.start_revision("r", 1, owner=_dead_owner(), job_id="job",
                                    event="sandbox starting", admit=lambda slots: True)
        seen = store.get_job("job")
        # A redelivery of the same task takes it over first: the resume read is stale.
        assert store.start_revision("r", 1, owner=_dead_owner(), job_id="job",
                                    event="sandbox starting", admit=lambda slots: True)
        assert store.resume_lost_job(seen, "gone") is None
        resumed = store.resume_lost_job(store.get_job("job"), "gone")
        assert resumed is not None and (resumed.status, resumed.resumes, resumed.requeues) \
            == ("accepted", 1, 1)
        assert store.resume_lost_job(store.get_job("job"), "gone") is None  # not started
        assert [e.kind for e in store.list_events("r")].count("job_resumed") == 1
        # The old task (start 0) arriving late is stale; the resume (start 1) runs.
        assert store.start_revision("r", 1, owner=current_owner(), job_id="job",
                                    event="sandbox starting", admit=lambda slots: True) is None
        assert store.start_revision("r", 1, owner=current_owner(), job_id="job", resumes=1,
                                    event="sandbox starting", admit=lambda slots: True)
        assert store.get_job("job").status == "started"
        # A parked job is not started by any delivery: its wake queues the next resume.
        # Only the current start may fail the revision (a crash loop's give-up, a broken
        # sandbox job): an older copy writes nothing.
        assert not store.fail_job_revision("job", 0, "gave up", {"error": None})
        assert store.get_revision("r", 1).status == "running"
        assert store.park_job("job")
        assert store.start_revision("r", 1, owner=current_owner(), job_id="job", resumes=1,
                                    event="sandbox starting", admit=lambda slots: True) is None
        assert not store.fail_job_revision("job", 1, "gave up", {"error": None})  # parked
        assert [e.kind for e in store.list_events("r")].count("sandbox_failed") == 0
    finally:
        store.close()


def test_a_run_left_running_after_its_revision_finished_takes_the_revisions_state(
        tmp_path: Path) -> None:
    store = SqlStore.open(f"sqlite:///{tmp_path / 'r.db'}")
    try:
        for run_id, status, error in (
                ("ok", "succeeded", None),
                ("blocked", "stopped", {"type": "AttemptUnresolved", "message": "m",
                                        "identity": "orchestrate/#0@:0"})):
            store.ensure_run(run_id)
            number = store.add_revision(run_id, "src", "d")
            # the store went away between the revision's write and the run's
            store.finish_revision(run_id, number, status, {"error": error})
        assert sweep_revisions(store, 30.0) == []
        assert store.get_run("ok").status == "succeeded"
        blocked = store.get_run("blocked")
        assert (blocked.status, blocked.detail) == (
            "blocked", "blocked: unresolved attempt at orchestrate/#0@:0")
    finally:
        store.close()


def test_a_task_id_says_which_start_of_its_job_it_is() -> None:
    from workers.recovery import resumes_of, sandbox_task_id

    assert [resumes_of(sandbox_task_id("j", n), "j") for n in (0, 1, 12)] == [0, 1, 12]
    for forged in ("j/sandbox/resume-0", "j/sandbox/resume-01", "j/sandbox/resume-x",
                   "k/sandbox", "j/sandbox/resume-", "j/sandbox/resume--1",
                   # digits of other scripts: each was a second task id (and so a second
                   # job lease) for start 1, or a traceback for superscript two
                   "j/sandbox/resume-\u0661", "j/sandbox/resume-\uff11",
                   "j/sandbox/resume-\U0001d7cf", "j/sandbox/resume-\u06601",
                   "j/sandbox/resume-\u00b2"):
        assert resumes_of(forged, "j") is None, forged

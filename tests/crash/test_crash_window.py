"""The paper's E4 and more: real processes killed with SIGKILL between dispatch and commit."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

from broker.envelope import Envelope
from broker.errors import InputError
from broker.identity import Identity
from broker.records import AttemptStatus
from broker.sqlstore import SqlStore
from orchestrator.certificate import verify
from orchestrator.embedded import open_services
from orchestrator.reconcile import reconcile_attempt, result_from_log, sweep
from sandbox.runner import ProcessRunner

from .kit import (
    operator_recover,
    provider_lines,
    run_child,
    script,
    settings_for,
    start_child,
)

SEQ = {"orchestrate/#0@:0": {"prompt": "first frame"},
       "orchestrate/#1@:0": {"prompt": "second frame"}}
FANOUT = {f"orchestrate/#{i}>orchestrate.gen/#0@{i}:0": {"prompt": p}
          for i, p in enumerate(["left panel", "middle panel", "right panel"])}
KILLED = -9


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def services(home: Path):
    opened = open_services(settings_for(home), runner=ProcessRunner())
    yield opened
    opened.close()


def replay(services, name: str, run_id: str = "crash"):
    return services.pipeline().run(run_id, script(name), {}, Envelope()).to_json()


def open_attempts(services, run_id: str = "crash"):
    return services.store.list_attempts(run_id, frozenset({AttemptStatus.PENDING,
                                                            AttemptStatus.UNRESOLVED}))


def test_kill_after_provider_before_commit_is_detected_before_any_handler(home, services):
    assert run_child(home, "crash", "crash_seq", mode="after") == KILLED
    assert len(provider_lines(home)) == 1  # the provider did the work; the commit was lost
    assert [a.status for a in open_attempts(services)] == [AttemptStatus.PENDING]

    report = replay(services, "crash_seq")
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "AttemptUnresolved"
    assert report["error"]["identity"] == "orchestrate/#0@:0"
    assert report["calls"]["executed"] == 0
    assert len(provider_lines(home)) == 1
    assert services.store.get_run("crash").status == "blocked"


def test_kill_during_a_sleeping_handler(home, services):
    child = start_child(home, "crash", "crash_seq", mode="sleep")
    deadline = time.monotonic() + 30
    # Killed once the request left (its dispatch record): before that, nothing can have
    # been paid and the attempt is abandoned as never sent (the call simply runs again).
    while not [a for a in open_attempts(services) if a.sent_at] and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert open_attempts(services), "the attempt must be durable before the provider runs"
    assert open_attempts(services)[0].sent_at, "the dispatch is recorded before the request"
    os.kill(child.pid, 9)
    child.join(10)
    report = replay(services, "crash_seq")
    assert report["error"]["type"] == "AttemptUnresolved"
    assert len(provider_lines(home)) == 0


def test_kill_mid_call_leaves_the_intent_line_and_from_log_says_what_to_do(home, services):
    from typer.testing import CliRunner

    from workers.cli import app

    assert run_child(home, "crash", "crash_seq", mode="mid-call") == KILLED
    (line,) = provider_lines(home)  # the request left; no answer was ever recorded
    assert (line["outcome"], line["identity"]) == ("sent", "orchestrate/#0@:0")
    assert sweep(services.store, services.settings.attempt_lease_seconds)
    log_path = home / "provider-log.jsonl"
    with pytest.raises(InputError, match="no answer was recorded") as caught:
        result_from_log(services.store, log_path, "crash", "orchestrate/#0@:0")
    for part in (line["idempotency_key"], line["ts"], "Check with the provider",
                 "--result FILE", "--abandon"):
        assert part in str(caught.value)
    done = CliRunner().invoke(app, ["reconcile", "crash", "orchestrate/#0@:0", "--from-log",
                                    str(log_path), "--operator", "ana", "--reason", "lost"],
                              env={"REVISE_HOME": str(home), "REVISE_SANDBOX": "process"})
    assert done.exit_code == 2 and line["idempotency_key"] in done.output, done.output
    assert [a.status for a in open_attempts(services)] == [AttemptStatus.UNRESOLVED]


def test_from_log_on_another_host_says_what_the_run_store_knows(home, services, tmp_path):
    """The killed broker's provider log is on its own host; another host's log has no line
    for the call: the run store's dispatch record says the request left, when, under
    which key, and who ran it."""
    assert run_child(home, "crash", "crash_seq", mode="mid-call") == KILLED
    (line,) = provider_lines(home)
    assert sweep(services.store, services.settings.attempt_lease_seconds)
    elsewhere = tmp_path / "another-host" / "provider-log.jsonl"
    with pytest.raises(InputError, match="sent its request at") as caught:
        result_from_log(services.store, elsewhere, "crash", "orchestrate/#0@:0")
    (attempt,) = open_attempts(services)
    for part in (line["idempotency_key"], "no answer was recorded", attempt.owner,
                 "--from-provider", "--result FILE", "--abandon"):
        assert part in str(caught.value)


def test_three_concurrent_attempts_killed_at_a_barrier_all_block(home, services):
    assert run_child(home, "crash", "crash_fanout", mode="barrier") == KILLED
    assert len(open_attempts(services)) == 3
    marked = sweep(services.store, services.settings.attempt_lease_seconds)
    assert len(marked) == 3
    assert sweep(services.store, services.settings.attempt_lease_seconds) == []
    report = replay(services, "crash_fanout")
    assert report["status"] == "stopped"
    assert report["error"]["type"] == "AttemptUnresolved"
    assert report["calls"]["executed"] == 0
    assert len(services.store.list_attempts("crash", frozenset({AttemptStatus.UNRESOLVED}))) == 3
    assert provider_lines(home) == []


def test_abandon_executes_once_then_replays(home, services):
    run_child(home, "crash", "crash_seq", mode="before")
    sweep(services.store, services.settings.attempt_lease_seconds)
    decision = reconcile_attempt(services.store, "crash", "orchestrate/#0@:0",
                                 operator="ana", reason="provider has no record")
    assert decision["decision"] == "abandoned"
    first = replay(services, "crash_seq")
    assert first["status"] == "succeeded"
    assert first["calls"]["executed"] == 2
    second = replay(services, "crash_seq")
    assert (second["calls"]["replayed"], second["calls"]["executed"]) == (2, 0)
    assert len(provider_lines(home)) == 2
    events = [e for e in services.store.list_events("crash") if e.kind == "attempt_reconciled"]
    assert events and events[0].data["operator"] == "ana"


def test_write_back_result_replays_with_zero_executions(home, services):
    run_child(home, "crash", "crash_seq", mode="after")
    known = {"artifact": {"id": "sha256:" + "0" * 64}, "note": "from the provider console"}
    sweep(services.store, services.settings.attempt_lease_seconds)
    reconcile_attempt(services.store, "crash", Identity.parse("orchestrate/#0@:0"),
                      result=known, operator="ana", reason="provider shows it completed")
    report = replay(services, "crash_seq")
    assert report["status"] == "succeeded"
    assert report["result"][0] == known["artifact"]["id"]
    assert (report["calls"]["replayed"], report["calls"]["executed"]) == (1, 1)
    assert [line["identity"] for line in provider_lines(home)] == ["orchestrate/#0@:0",
                                                                   "orchestrate/#1@:0"]


def test_pending_attempt_of_a_live_owner_cannot_be_reconciled(home, services):
    child = start_child(home, "crash", "crash_seq", mode="sleep")
    try:
        deadline = time.monotonic() + 30
        while not open_attempts(services) and time.monotonic() < deadline:
            time.sleep(0.05)
        from broker.errors import InputError

        with pytest.raises(InputError, match="still pending"):
            reconcile_attempt(services.store, "crash", "orchestrate/#0@:0", operator="ana",
                              reason="too early")
    finally:
        os.kill(child.pid, 9)
        child.join(10)


RUNS = int(os.environ.get("REVISE_CRASH_RUNS", "200"))


def wait_for_first_attempt(services, child, run_id: str) -> None:
    deadline = time.monotonic() + 30
    while (child.is_alive() and not open_attempts(services, run_id)
           and time.monotonic() < deadline):
        time.sleep(0.002)


@pytest.mark.slow
def test_randomized_crashes_never_pay_twice_silently(home, services):
    rng = random.Random(20261130)
    decisions: list[str] = []
    for index in range(RUNS):
        run_id = f"rand-{index}"
        child = start_child(home, run_id, "crash_fanout", latency=rng.uniform(0.01, 0.04))
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0.0, 0.35))  # anywhere: before, inside or after the calls
        else:
            # Inside the window, however long the child takes to reach its first call.
            wait_for_first_attempt(services, child, run_id)
            time.sleep(rng.uniform(0.0, 0.02))
        try:
            os.kill(child.pid, 9)
        except ProcessLookupError:
            pass  # it finished (and was reaped) before the kill: a run with no crash
        child.join(10)
        for _round in range(5):
            report = replay(services, "crash_fanout", run_id)
            if report["status"] == "succeeded":
                break
            assert report["error"]["type"] == "AttemptUnresolved", report["error"]
            decisions += operator_recover(services, home, run_id, FANOUT)
        assert report["status"] == "succeeded", report
    print(f"crash decisions over {RUNS} runs: {decisions.count('resolved')} resolved, "
          f"{decisions.count('abandoned')} abandoned")
    assert decisions.count("resolved") + decisions.count("abandoned") >= RUNS // 10, (
        "the kills must land inside the crash window often enough to test it")
    lines = [line for line in provider_lines(home) if line["outcome"] == "ok"]
    per_identity: dict[tuple[str, str], int] = {}
    for line in lines:
        key = (line["run_id"], line["identity"])
        per_identity[key] = per_identity.get(key, 0) + 1
    assert max(per_identity.values()) == 1, "an identity was paid for twice"
    store = services.store
    assert isinstance(store, SqlStore)
    for index in range(RUNS):
        run_id = f"rand-{index}"
        slots = store.list_slots(run_id)
        assert len(slots) == 3, f"{run_id} lost a commit"
        cert = store.latest_certificate(run_id)
        assert verify(cert.digest, cert.entries, slots).differences == ()

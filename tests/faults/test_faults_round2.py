"""Faults lose nothing, part 2 (issue 25): a full disk on the broker host, every role
SIGKILLed while sandbox messages sit prefetched, a broker worker killed between the
provider's work and the commit, and clients started during each outage.

Through the real stack (the Procfile's roles as processes on a private PostgreSQL and
Redis, ``conftest.FaultStack``); where a test pays a provider it is the fake HTTP
provider (``tests/fakes/openai_server.py``), whose own charge ledger is the count of
what was paid. Each test prints one ``FAULT`` line: charged, committed, duplicates,
lost, stuck and the recovery time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.records import AttemptStatus, JobStatus, RunStatus
from tests.disks import full_disk
from tests.fakes.openai_server import (
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    complete_late,
    slow,
)
from workers.transport import Transport

from ..workers.conftest import ROOT, script, wait_for
from .conftest import FaultStack
from .services import PrivatePostgres, PrivateRedis
from .test_faults import (
    JOBS,
    SCRIPT,
    SHOTS,
    Waiting,
    _answered,
    _args,
    _check_invariants,
    _reconcile_open_attempts,
)

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

OPEN = frozenset({AttemptStatus.PENDING, AttemptStatus.UNRESOLVED, AttemptStatus.UNCERTAIN})
TERMINAL_JOBS = frozenset({JobStatus.FINISHED, JobStatus.LOST})
ALL_JOBS = frozenset(JobStatus)


# ---- shared -------------------------------------------------------------------------------


@pytest.fixture
def own_stack(tmp_path: Path, private_services: tuple[PrivatePostgres, PrivateRedis]
              ) -> Iterator[Any]:
    """``own_stack(name, **FaultStack options)``: a stack of this test alone (its own
    database on the module's private servers), stopped at the end of the test."""
    made: list[FaultStack] = []

    def make(name: str, **options: Any) -> FaultStack:
        postgres, redis = private_services
        (tmp_path / name).mkdir()
        built = FaultStack(tmp_path / name, postgres, redis, database=f"revise_{name}",
                           **options)
        made.append(built)
        return built

    yield make
    for built in made:
        built.stop()


def _http_provider(stack: FaultStack, server: FakeOpenAIServer, *, honours: bool = False
                   ) -> None:
    stack.env.update({"REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": server.base_url,
                      "REVISE_PROVIDER_API_KEY": FAKE_API_KEY,
                      "REVISE_PROVIDER_HONOURS_IDEMPOTENCY_KEY": str(honours).lower()})


def _working(server: FakeOpenAIServer, seconds: float) -> None:
    """Every request the server answers by default works ``seconds`` first (as the local
    provider's latency in the other fault tests)."""
    default = server.default_behaviour

    def behaviour(path: str) -> Any:
        return slow(seconds, default(path))
    server.default_behaviour = behaviour  # type: ignore[method-assign]


def _revise(stack: FaultStack, home: Path, *argv: str, timeout: float = 180,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """A ``revise`` command from another place (its own REVISE_HOME), the stack's
    settings."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-m", "workers.cli", *argv], cwd=home,
                          env={**stack.env, "REVISE_HOME": str(home), **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def _stuck(stack: FaultStack, run_ids: list[str], *, blocked: bool = True) -> list[str]:
    """Runs, revisions or jobs of ``run_ids`` still open (running, accepted...; with
    ``blocked``, a run waiting for an operator too)."""
    stuck = []
    open_runs = (RunStatus.RUNNING, RunStatus.BLOCKED) if blocked else (RunStatus.RUNNING,)
    for run_id in run_ids:
        run = stack.store.get_run(run_id)
        if run is not None and run.status in open_runs:
            stuck.append(f"{run_id}: run {run.status}")
        stuck += [f"{run_id}: revision {r.revision} running"
                  for r in stack.store.list_revisions(run_id) if r.status == "running"]
    stuck += [f"{j.run_id}: job {j.job_id[:8]} {j.status}"
              for j in stack.store.list_jobs(ALL_JOBS)
              if j.run_id in run_ids and j.status not in TERMINAL_JOBS]
    return stuck


def _from_log(stack: FaultStack, run_ids: list[str]) -> dict[str, int]:
    """Charged = dispatches the local provider answered with a result; committed = those
    whose result is the run's slot."""
    lines = [line for line in _answered(stack) if line["run_id"] in run_ids
             and line["outcome"] == "ok"]
    paid = Counter((line["run_id"], line["identity"]) for line in lines)
    committed = 0
    for (run_id, identity) in paid:
        slots = {str(s.identity): s for s in stack.store.list_slots(run_id)}
        committed += identity in slots and slots[identity].committed_at is not None
    return {"charged": len(lines), "committed": committed,
            "duplicates": sum(n - 1 for n in paid.values()), "lost": len(paid) - committed}


def _from_server(stack: FaultStack, server: FakeOpenAIServer, run_ids: list[str]
                 ) -> dict[str, Any]:
    """Counted from the provider's own ledger: a charge is matched to its attempt by its
    Idempotency-Key (one key per request and run), and committed when the attempt's
    identity has a slot of that payload."""
    attempts = {a.idempotency_key: a for run_id in run_ids
                for a in stack.store.list_attempts(run_id)}
    charged = Counter(c.key for c in server.charges if c.key in attempts)
    committed, lost = 0, []
    for key in charged:
        attempt = attempts[key]
        slots = {str(s.identity): s for s in stack.store.list_slots(attempt.run_id)}
        slot = slots.get(str(attempt.identity))
        if slot is not None and slot.committed_at is not None and \
                slot.digest == attempt.digest:
            committed += 1
        else:
            lost.append((attempt.run_id, str(attempt.identity)))
    return {"charged": sum(charged.values()), "committed": committed,
            "duplicates": sum(n - 1 for n in charged.values()), "lost": len(lost),
            "lost_at": lost, "foreign_charges": sum(1 for c in server.charges
                                                    if c.key not in attempts)}


def _fault_line(name: str, figures: dict[str, Any], stuck: list[str], recovery: float,
                extra: str = "") -> None:
    print(f"\nFAULT {name}: charged {figures['charged']}, committed {figures['committed']}, "
          f"duplicates {figures['duplicates']}, lost {figures['lost']}, stuck {len(stuck)}, "
          f"recovery {recovery:.1f} s" + (f"; {extra}" if extra else ""))


def _submit_fanout(stack: FaultStack, name: str, jobs: int = JOBS, shots: int = SHOTS
                   ) -> dict[str, Waiting]:
    return {f"{name}-{i}": Waiting(stack.client.submit(
        SCRIPT, {"shots": [f"{name} {i} shot {k}" for k in range(shots)]}, Envelope(),
        f"{name}-{i}")) for i in range(jobs)}


def _resume(stack: FaultStack, reports: dict[str, dict[str, Any]], *,
            reconcile: bool = False) -> list[str]:
    """Submit again every run whose first outcome was not a success (what an operator does
    for a `lost` revision); each must succeed. ``reconcile``: first decide its open
    attempts from the provider log as an operator would (``test_faults``); without it a
    run blocked on one fails the test."""
    resumed = [run_id for run_id, report in reports.items() if report["status"] != "succeeded"]
    for run_id in resumed:
        if reconcile:
            _reconcile_open_attempts(stack, run_id)
        again = stack.client.submit(SCRIPT, _args(stack, run_id), Envelope(), run_id).wait(120)
        assert again["status"] == "succeeded", (run_id, again["error"])
        reports[run_id] = again
    return resumed


def _log_lines(stack: FaultStack, role_log: str, *needles: str) -> dict[str, int]:
    text = (stack.tmp_path / f"{role_log}.log").read_text(errors="replace")
    return {needle: text.count(needle) for needle in needles}


# ---- 1. a full disk on the broker host during a store outage --------------------------------


def test_full_disk_on_the_broker_host_during_a_postgres_outage(own_stack, tmp_path) -> None:
    """The capability worker's REVISE_HOME is a full 16 KiB tmpfs (its provider log, its
    commit spool and its artifact spool live there); PostgreSQL goes away for 15 s while
    its calls are paid. Every charged call must be committed once, nothing may block or
    stay running, and the worker must say it is degraded."""
    spill = tmp_path / "spill"  # the spool's fallback (TMPDIR): a disk with room, private
    spill.mkdir()
    with full_disk(tmp_path / "broker-home") as broker_home, \
            FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        _working(server, 0.75)
        stack = own_stack("fulldisk", role_env={"capabilities": {
            "REVISE_HOME": str(broker_home), "TMPDIR": str(spill)}})
        _http_provider(stack, server)
        stack.start_roles()
        handles = _submit_fanout(stack, "disk")
        wait_for(lambda: server.charged() >= 3, 120, "the first paid calls")
        stack.postgres.stop()
        time.sleep(15)
        stack.postgres.start()
        fixed = time.monotonic()
        assert stack.dead_roles() == [], f"workers died: logs in {stack.tmp_path}"
        reports = {run_id: waiting.result() for run_id, waiting in handles.items()}
        first = Counter(r["status"] for r in reports.values())
        errors = sorted({r["error"]["type"] for r in reports.values() if r["error"]})
        open_attempts = [(a.run_id, str(a.identity), a.status.value, a.sent_at, a.owner)
                         for run_id in handles for a in stack.store.list_attempts(run_id, OPEN)]
        assert open_attempts == [], (
            f"attempts left open by the full disk: {open_attempts}; reports "
            f"{ {a[0]: (reports[a[0]]['status'], reports[a[0]]['error']) for a in open_attempts} }"
            f"; logs in {stack.tmp_path}")
        resumed = _resume(stack, reports)
        probe = stack.client.submit(SCRIPT, {"shots": [f"disk probe {k}" for k in range(4)]},
                                    Envelope(), "disk-probe").wait(120)
        assert probe["status"] == "succeeded", probe["error"]
        recovery = time.monotonic() - fixed
        assert stack.dead_roles() == [], f"workers died: logs in {stack.tmp_path}"
        run_ids = [*handles, "disk-probe"]
        figures = _from_server(stack, server, run_ids)
        stuck = _stuck(stack, run_ids)
        said = _log_lines(stack, "capabilities0", "the provider log cannot be written",
                          "commit spool", "artifact spool", "kept in memory")
        spilled = sorted(p.name for p in spill.rglob("*") if p.is_file())
    assert figures["foreign_charges"] == 0, "a charge no attempt of these runs knows"
    assert figures["duplicates"] == 0, figures
    assert figures["lost"] == 0, f"paid results not committed: {figures['lost_at']}"
    assert figures["charged"] == figures["committed"] >= JOBS * SHOTS + 4
    assert stuck == [], stuck
    assert said["the provider log cannot be written"] > 0, \
        f"the broker worker never said its provider log is degraded: {stack.tmp_path}"
    _check_certificates(stack, run_ids)
    _fault_line("full-disk+pg15", figures, stuck, recovery,
                f"first outcomes {dict(first)} {errors}; {len(resumed)} resumed; degraded "
                f"lines: provider log {said['the provider log cannot be written']}, "
                f"commit spool {said['commit spool']}, artifact spool {said['artifact spool']}, "
                f"in memory {said['kept in memory']}; "
                f"{len(spilled)} files spilled to the fallback spool")


def _check_certificates(stack: FaultStack, run_ids: list[str]) -> None:
    from orchestrator.certificate import verify

    for run_id in run_ids:
        persisted = stack.store.latest_certificate(run_id)
        assert persisted is not None, run_id
        check = verify(persisted.digest, persisted.entries, stack.store.list_slots(run_id))
        assert not check.differences, (run_id, check.differences)


# ---- 2. every role SIGKILLed while sandbox messages sit prefetched ---------------------------


def _held_messages(stack: FaultStack) -> tuple[int, int]:
    """(delivered and unacknowledged sandbox messages, those of jobs not started yet)."""
    queue = stack.client.app.routing.queue("sandbox")
    transport = Transport(stack.client.broker_redis)
    delivered = {task for task in transport.task_ids(queue)
                 - transport.task_ids(queue, delivered=False) if "/sandbox" in task}
    accepted = {f"{j.job_id}/sandbox" for j in stack.store.list_jobs(
        frozenset({JobStatus.ACCEPTED}))}
    return len(delivered), len(delivered & accepted)


def test_every_role_sigkilled_with_prefetched_sandbox_messages(own_stack) -> None:
    """Twelve jobs for two sandbox slots; the sandbox worker prefetches (multiplier 4), so
    messages of jobs it has not started sit in the transport's unacked set (visibility
    timeout 3600 s) when every process is SIGKILLed. After the restart each job finishes
    or its revision is failed `lost` within a couple of sweeps, and resubmitting a lost
    run leaves no older revision open."""
    stack = own_stack("prefetch", worker_args={"sandbox": ["--prefetch-multiplier", "4"]})
    stack.start_roles()
    jobs = 12
    handles = _submit_fanout(stack, "pre", jobs=jobs, shots=4)
    run_ids = list(handles)

    def holding() -> tuple[int, int] | None:
        held = _held_messages(stack)
        return held if held[1] >= 1 and _paid(stack, run_ids) >= 2 else None
    held = wait_for(holding, 90, "a prefetched sandbox message of a job not yet started")
    for proc in stack.procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    for proc in stack.procs:
        proc.wait(30)
    killed = time.monotonic()
    stack.restart_roles()
    restarted = time.monotonic()
    try:
        wait_for(lambda: not _stuck(stack, run_ids, blocked=False), 60,
                 "every job finished or lost within 60 s of the restart")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {_stuck(stack, run_ids, blocked=False)}") from None
    settled = time.monotonic() - restarted
    reports = {run_id: waiting.result() for run_id, waiting in handles.items()}
    first = Counter(r["status"] for r in reports.values())
    blocked = sum(1 for r in run_ids if stack.store.get_run(r).status is RunStatus.BLOCKED)
    resumed = _resume(stack, reports, reconcile=True)
    # A resubmission never leaves an older revision (or its job) open.
    stuck = _stuck(stack, run_ids)
    assert stuck == [], stuck
    for run_id in resumed:
        revisions = stack.store.list_revisions(run_id)
        assert len(revisions) >= 2 and revisions[-1].status == "succeeded", run_id
    recovery = time.monotonic() - restarted
    figures = _from_log(stack, run_ids)
    assert figures["duplicates"] == 0 and figures["lost"] == 0, figures
    _check_invariants(stack, run_ids)
    kinds = Counter(e.kind for run_id in run_ids for e in stack.store.list_events(run_id))
    _fault_line("kill-all+prefetched", figures, stuck, recovery,
                f"{held[0]} sandbox messages held by the killed worker ({held[1]} of jobs "
                f"not started); every job finished or lost {settled:.1f} s after the restart "
                f"({time.monotonic() - killed:.1f} s after the kill to full recovery); first "
                f"outcomes {dict(first)}, {blocked} blocked on a call killed mid-flight, "
                f"{len(resumed)} resumed; events " + ", ".join(
                    f"{k}={kinds[k]}" for k in ("job_requeued", "revision_lost",
                                                "attempt_unresolved", "stale_delivery")
                    if kinds[k]))


def _paid(stack: FaultStack, run_ids: list[str]) -> int:
    return sum(1 for line in _answered(stack) if line["run_id"] in run_ids)


# ---- 3. a broker worker killed between the provider's work and the commit --------------------

CRASH_SEQ = script("crash_seq")
SMALL = (("dispatch", "threads", 2), ("sandbox", "prefork", 1),
         ("capabilities", "threads", 2), ("reconcile", "threads", 1))


def _kill_broker_after_the_work(stack: FaultStack, server: FakeOpenAIServer, run_id: str
                                ) -> tuple[Any, float]:
    """Submit crash_seq; the provider does the first call's work (charged, kept under its
    key) and holds its answer back; the broker worker is SIGKILLed then, and restarted
    as an operator would. Returns the stopped run's report and the time from the kill
    to the attempt being unresolved."""
    server.queue(IMAGES, complete_late(60))
    handle = stack.client.submit(CRASH_SEQ, {}, Envelope(), run_id)
    wait_for(lambda: server.charged() == 1, 90, "the provider's work on the first call")
    wait_for(lambda: [a for a in stack.store.list_attempts(run_id) if a.sent_at], 30,
             "the dispatch record")
    _kill(stack.current["capabilities"])
    killed = time.monotonic()
    stack.names.remove(next(n for n in stack.names if n.startswith("capabilities0-")))
    stack.current["capabilities"] = stack.worker(
        "capabilities", concurrency=2, index=1, env=stack.role_env.get("capabilities"))
    stack.wait_ready(60)
    wait_for(lambda: stack.store.list_attempts(run_id, frozenset({AttemptStatus.UNRESOLVED})),
             60, "the attempt marked unresolved")
    unresolved_after = time.monotonic() - killed
    report = handle.wait(90)
    return report, unresolved_after


def _unresolved_from_elsewhere(stack: FaultStack, home: Path, run_id: str) -> dict[str, Any]:
    listed = _revise(stack, home, "attempts", "--unresolved", "--run-id", run_id, "--json")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    (attempt,) = json.loads(listed.stdout)["attempts"]
    assert attempt["status"] == "unresolved", attempt
    assert attempt["sent_at"] is not None, "the dispatch record says the request left"
    assert attempt["answered_at"] is None, "the killed worker never had the answer"
    return attempt


@pytest.mark.parametrize("lookup", [True, False], ids=["with-lookup", "without-lookup"])
def test_broker_killed_between_the_providers_work_and_the_commit(own_stack, tmp_path,
                                                                 lookup: bool) -> None:
    with FakeOpenAIServer(api_key=FAKE_API_KEY,
                          idempotency="honour" if lookup else "ignore") as server:
        stack = own_stack("paid" + ("lookup" if lookup else "nolookup"), roles=SMALL)
        _http_provider(stack, server)
        stack.start_roles()
        run_id = "paid"
        report, unresolved_after = _kill_broker_after_the_work(stack, server, run_id)
        assert report["status"] == "stopped", report
        assert report["error"]["type"] == "AttemptUnresolved", report["error"]
        assert stack.store.get_run(run_id).status is RunStatus.BLOCKED
        operator = tmp_path / "operator"  # another REVISE_HOME: nothing of the broker's disk
        attempt = _unresolved_from_elsewhere(stack, operator, run_id)
        identity = attempt["identity"]
        started = time.monotonic()
        if lookup:
            asked = _revise(stack, operator, "reconcile", run_id, identity, "--from-provider",
                            "--operator", "ana", "--reason", "ask the provider", "--json",
                            env={"REVISE_PROVIDER_LOOKUP_PATH": "/requests/{key}"})
            assert asked.returncode == 0, asked.stdout + asked.stderr
            decided = json.loads(asked.stdout)
            assert decided["decision"] == "resolved" and "warning" not in decided, decided
            assert server.charged() == 1, "asking the provider paid nothing"
        else:
            # The run stays blocked: submitting it again pays nothing at that identity.
            again = stack.client.submit(CRASH_SEQ, {}, Envelope(), run_id).wait(90)
            assert again["error"]["type"] == "AttemptUnresolved", again
            assert server.charged() == 1
            asked = _revise(stack, operator, "reconcile", run_id, identity, "--from-provider",
                            "--operator", "ana", "--reason", "ask the provider", "--json")
            assert asked.returncode != 0, "a provider without a lookup cannot be asked"
            abandoned = _revise(stack, operator, "reconcile", run_id, identity, "--abandon",
                                "--operator", "ana", "--reason", "the provider cannot say",
                                "--json")
            assert abandoned.returncode == 0, abandoned.stdout + abandoned.stderr
            decided = json.loads(abandoned.stdout)
            assert decided["decision"] == "abandoned", decided
            assert "paid again" in decided.get("warning", ""), decided
        resumed = stack.client.submit(CRASH_SEQ, {}, Envelope(), run_id).wait(90)
        assert resumed["status"] == "succeeded", resumed["error"]
        recovery = time.monotonic() - started
        figures = _from_server(stack, server, [run_id])
        stuck = _stuck(stack, [run_id])
        assert stuck == [] and figures["lost"] == 0, (stuck, figures)
        assert stack.store.list_attempts(run_id, OPEN) == []
        if lookup:
            assert (resumed["calls"]["replayed"], resumed["calls"]["executed"]) == (1, 1)
            assert figures["duplicates"] == 0 and figures["charged"] == 2, figures
        else:
            # Abandoned, as the warning said: the provider did the work again.
            assert figures["duplicates"] == 1 and figures["charged"] == 3, figures
    _fault_line(f"broker-killed-after-work ({'lookup' if lookup else 'no lookup'})",
                figures, stuck, recovery,
                f"attempt unresolved {unresolved_after:.1f} s after the kill, shown from "
                f"another REVISE_HOME with sent_at set and no answer; "
                + ("resolved by --from-provider, nothing paid again" if lookup else
                   "--from-provider refused, --abandon warned, the resubmission paid it again"))


# ---- 4. a client started during each outage ----------------------------------------------------


def _start_client(stack: FaultStack, home: Path, run_id: str, timeout: float
                  ) -> tuple[subprocess.Popen[str], float]:
    home.mkdir(parents=True, exist_ok=True)
    (home / "fanout.py").write_text(SCRIPT, encoding="utf-8")
    (home / "args.json").write_text(json.dumps(
        {"shots": [f"{run_id} shot {k}" for k in range(4)]}), encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "workers.cli", "submit", "fanout.py", "--run-id", run_id,
         "--args", "args.json", "--wait", "--timeout", str(timeout), "--json"], cwd=home,
        env={**stack.env, "REVISE_HOME": str(home), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc, time.monotonic()


@pytest.mark.parametrize("service", ["redis", "postgres"])
def test_a_client_started_during_an_outage(stack: Any, tmp_path: Path, service: str) -> None:
    """`revise submit --wait` begun while Redis (or PostgreSQL) is away: one with a
    timeout longer than the outage queues its job once the service is back and exits 0;
    one whose timeout ends during the outage exits 3 (could not tell) and leaves nothing
    open behind it."""
    outage = 15.0
    name = f"cli-{service}"
    down, up = ((stack.redis.kill, stack.redis.start) if service == "redis"
                else (stack.postgres.stop, stack.postgres.start))
    down()
    time.sleep(1)
    patient, began = _start_client(stack, tmp_path / "patient", f"{name}-patient", 90)
    hasty, _ = _start_client(stack, tmp_path / "hasty", f"{name}-hasty", 5)
    try:
        hasty_out, hasty_err = hasty.communicate(timeout=30)
        hasty_after = time.monotonic() - began
        time.sleep(max(0.0, outage - (time.monotonic() - began)))
        assert patient.poll() is None, "the patient client did not wait for the service"
    finally:
        up()
    restored = time.monotonic()
    out, errors = patient.communicate(timeout=120)
    answered = time.monotonic() - restored
    assert hasty.returncode == 3, (hasty.returncode, hasty_out, hasty_err)
    assert "Traceback" not in hasty_err, hasty_err
    assert patient.returncode == 0, (patient.returncode, out, errors)
    assert "Traceback" not in errors, errors
    report = json.loads(out)
    assert report["status"] == "succeeded" and report["revision"] == 1, report
    run_id = f"{name}-patient"
    jobs = [j for j in stack.store.list_jobs(ALL_JOBS) if j.run_id == run_id]
    assert len(jobs) == 1 and jobs[0].status is JobStatus.FINISHED, jobs
    assert [r.revision for r in stack.store.list_revisions(run_id)] == [1]
    # The hasty client gave up before queueing: nothing of its run is left open.
    hasty_run = f"{name}-hasty"
    stuck = _stuck(stack, [run_id, hasty_run])
    assert stuck == [], stuck
    figures = _from_log(stack, [run_id, hasty_run])
    assert figures["duplicates"] == 0 and figures["lost"] == 0, figures
    assert figures["charged"] == 4, figures
    _check_invariants(stack, [run_id])
    progress = [line for line in errors.splitlines() if line.strip()]
    _fault_line(f"client-during-{service}-outage", figures, stuck, answered,
                f"outage {outage:.0f} s; --timeout 90 exited 0 {answered:.1f} s after the "
                f"service was back; --timeout 5 exited 3 after {hasty_after:.1f} s; "
                f"{len(progress)} progress lines"
                + (f", e.g. {progress[0][:100]!r}" if progress else ""))


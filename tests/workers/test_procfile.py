"""The Procfile stack (honcho): `revise submit --wait --json` and Flower's HTTP API."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from broker.providers import ProviderLog

from .conftest import ROOT, SCRIPTS, free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def get_json(url: str, auth: tuple[str, str] | None = None, timeout: float = 60.0) -> dict:
    """The JSON of ``url`` once it answers 200 (Flower's API comes up after its workers)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, auth=auth, timeout=5)
            if response.status_code == 200:
                return response.json()
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {timeout} s")
        time.sleep(0.3)


def test_revise_submit_wait_json_prints_the_run_json(make_stack, tmp_path) -> None:
    stack = make_stack()
    stack.procfile(free_port())
    stack.wait_ready()
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    command = [sys.executable, "-m", "workers.cli", "submit", "--run-id", "run-cli",
               "--args", str(args), "--wait", "--timeout", "60", "--json"]
    first = subprocess.run([*command, str(SCRIPTS / "fanout_v1.py")], cwd=ROOT,
                           env=stack.env, capture_output=True, text=True, timeout=90)
    assert first.returncode == 1, first.stderr
    report = json.loads(first.stdout)
    assert report["status"] == "failed"
    assert report["calls"] == {"executed": 4, "succeeded": 3, "failed": 1,
                               "uncertain": 0, "replayed": 0,
                               "denied": 0}
    repair = subprocess.run([*command, str(SCRIPTS / "fanout_repaired.py")], cwd=ROOT,
                            env=stack.env, capture_output=True, text=True, timeout=90)
    assert repair.returncode == 0, repair.stderr
    report = json.loads(repair.stdout)
    assert set(report) >= {"run_id", "revision", "status", "result", "error", "calls",
                           "identities", "orphans", "gate", "certificate"}
    assert (report["run_id"], report["revision"], report["status"]) == ("run-cli", 2,
                                                                       "succeeded")
    assert (report["calls"]["replayed"], report["calls"]["executed"]) == (3, 1)
    assert report["certificate"]["differences"] == []


# The path-shift story is left out: how many branches run before the stop is timing.
STORIES = {
    "fanout": ["fanout_v1", "fanout_repaired", "fanout_relocated"],
    "e3": ["e3_v1", "e3_v2", "e3_v3"],
    "divergence": ["payload_v1", "payload_v2"],
    "ledger": ["loop3", "loop6"],
    "orphans": ["shrink_v1", "shrink_v2"],
    "key-order": ["keyorder_v1", "keyorder_v2"],
}


def _shape(report: dict) -> tuple:
    return (report["status"], report["calls"], (report["error"] or {}).get("type"),
            [c["kind"] for c in report["gate"]["counterexamples"]],
            sorted((i["site"], tuple(i["path"]), i["outcome"]) for i in report["identities"]),
            [o["identity"] for o in report["orphans"]])


def test_every_core_scenario_via_revise_submit_matches_embedded(make_stack, tmp_path) -> None:
    from broker.envelope import Envelope
    from broker.settings import SandboxKind, Settings
    from orchestrator.embedded import open_services
    from sandbox.runner import ProcessRunner

    stack = make_stack()
    stack.procfile(free_port())
    stack.wait_ready()
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    settings = Settings(home=tmp_path / "embedded", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        pipeline = services.pipeline()
        for story, names in STORIES.items():
            for name in names:
                done = subprocess.run(
                    [sys.executable, "-m", "workers.cli", "submit",
                     str(SCRIPTS / f"{name}.py"), "--run-id", story, "--args", str(args),
                     "--wait", "--timeout", "60", "--json"],
                    cwd=ROOT, env=stack.env, capture_output=True, text=True, timeout=90)
                queued = json.loads(done.stdout)
                embedded = pipeline.run(story, (SCRIPTS / f"{name}.py").read_text(),
                                        {"shots": ["a", "b", "c", "d"]}, Envelope()).to_json()
                assert done.returncode == (0 if embedded["status"] == "succeeded" else 1)
                assert _shape(queued) == _shape(embedded), (story, name)
    finally:
        services.close()
    dispatches = stack.provider_log()  # every dispatch answered: its intent and outcome line
    assert [e["outcome"] for e in dispatches if e["outcome"] == "sent"] == []
    assert 2 * len(dispatches) == len(ProviderLog(settings.provider_log_path).lines())


def _flower_workers(base: str, expected: set[str], timeout: float = 40.0) -> dict:
    """``/api/workers`` without ``?refresh=1``, polled until ``expected`` are listed."""
    deadline = time.monotonic() + timeout
    while True:
        workers = get_json(f"{base}/workers")
        if expected <= set(workers) or time.monotonic() > deadline:
            return workers
        time.sleep(0.5)


def _flower_tasks(base: str, ids: set[str], timeout: float = 30.0) -> dict:
    """Flower's view of the tasks ``ids``, polled until every one of them is ready."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = get_json(f"{base}/tasks?limit=500")
        ready = {i for i, t in tasks.items() if t.get("state") in ("SUCCESS", "FAILURE")}
        if ids <= ready or time.monotonic() > deadline:
            return tasks
        time.sleep(0.5)


def test_flower_lists_every_scaled_worker_without_a_refresh(make_stack) -> None:
    from .conftest import HOST

    port = free_port()
    stack = make_stack()
    stack.procfile(port, broker=3)
    stack.wait_ready()
    stack.client.submit((SCRIPTS / "e3_v2.py").read_text(), {}, None, "run-fl").wait(60)

    base = f"http://127.0.0.1:{port}/api"
    expected = {f"{role}.1@{HOST}" for role in ("dispatcher", "sandbox", "reconciler")} | {
        f"broker.{n}@{HOST}" for n in (1, 2, 3)}
    workers = _flower_workers(base, expected)  # stock Flower: {} until ?refresh=1
    assert expected <= set(workers), sorted(workers)
    assert sum(name.startswith("broker.") for name in workers) == 3
    registered = {task for info in workers.values() for task in info.get("registered", [])}
    assert {"revise.dispatch", "revise.sandbox", "revise.capability"} <= registered
    names = {t.get("name") for t in _flower_tasks(base, set()).values()}
    # A capability task sends no events (four per job of four calls, costlier than the
    # call's own work): Flower lists the jobs, whose tasks carry their calls' outcome.
    assert {"revise.dispatch", "revise.sandbox"} <= names and "revise.capability" not in names


def test_flower_task_states_follow_the_runs(make_stack) -> None:
    port = free_port()
    stack = make_stack()
    stack.procfile(port)
    stack.wait_ready()
    args = {"shots": ["a", "b", "c", "d"]}
    jobs = {}
    for name in ("fanout_v1", "fanout_edited", "fanout_repaired"):
        handle = stack.client.submit((SCRIPTS / f"{name}.py").read_text(), args, None,
                                     "run-truth")
        jobs[name] = (handle.job_id, handle.wait(60))
    assert [jobs[n][1]["status"] for n in jobs] == ["failed", "stopped", "succeeded"]

    base = f"http://127.0.0.1:{port}/api"
    failed_id, edited_id, repaired_id = (jobs[n][0] for n in jobs)
    want = {failed_id, f"{failed_id}/sandbox", edited_id, repaired_id,
            f"{repaired_id}/sandbox"}
    tasks = _flower_tasks(base, want)
    state = {i: tasks[i]["state"] for i in want if i in tasks}
    # accepted and queued: the dispatch task succeeded; the sandbox task is the run
    assert state[failed_id] == "SUCCESS"
    assert state[f"{failed_id}/sandbox"] == "FAILURE"
    failure = tasks[f"{failed_id}/sandbox"]["exception"]
    assert "RunFailed" in failure and "CapabilityError" in failure
    assert "orchestrate." in failure or "@" in failure  # the identity of the failed call
    # refused by the gate: never reached a sandbox, the dispatch task is the run
    assert state[edited_id] == "FAILURE"
    assert "RunStopped" in tasks[edited_id]["exception"]
    assert "GateRejected" in tasks[edited_id]["exception"]
    assert state[f"{repaired_id}/sandbox"] == "SUCCESS"
    assert "'succeeded'" in tasks[f"{repaired_id}/sandbox"]["result"]
    # capability tasks send no events: Flower shows the job, not its calls
    assert not [i for i in tasks if "/calls/" in i]

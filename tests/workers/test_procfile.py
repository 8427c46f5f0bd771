"""The Procfile stack (honcho): `revise submit --wait --json` and Flower's HTTP API."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import ROOT, SCRIPTS, free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def _get(url: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=5)
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
    command = [sys.executable, "-m", "orchestrator.cli", "submit", "--run-id", "run-cli",
               "--args", str(args), "--wait", "--timeout", "60", "--json"]
    first = subprocess.run([*command, str(SCRIPTS / "fanout_v1.py")], cwd=ROOT,
                           env=stack.env, capture_output=True, text=True, timeout=90)
    assert first.returncode == 1, first.stderr
    report = json.loads(first.stdout)
    assert report["status"] == "failed"
    assert report["calls"] == {"executed": 4, "succeeded": 3, "failed": 1, "replayed": 0,
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
                    [sys.executable, "-m", "orchestrator.cli", "submit",
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
    assert len(stack.provider_log()) == len(settings.provider_log_path.read_text().splitlines())


def test_flower_from_the_procfile_lists_our_workers_and_tasks(make_stack) -> None:
    port = free_port()
    stack = make_stack()
    stack.procfile(port)
    stack.wait_ready()
    stack.client.submit((SCRIPTS / "e3_v2.py").read_text(), {}, None, "run-fl").wait(60)

    base = f"http://127.0.0.1:{port}/api"
    workers = _get(f"{base}/workers?refresh=1")
    for role in ("dispatcher", "sandbox", "broker", "reconciler"):
        assert any(name.startswith(f"{role}@") for name in workers), (role, list(workers))
    registered = {task for info in workers.values() for task in info.get("registered", [])}
    assert {"revise.dispatch", "revise.sandbox", "revise.capability"} <= registered

    deadline = time.monotonic() + 20
    names: set[str] = set()
    while time.monotonic() < deadline:
        names = {t.get("name") for t in _get(f"{base}/tasks?limit=100").values()}
        if {"revise.dispatch", "revise.sandbox", "revise.capability"} <= names:
            break
        time.sleep(0.5)
    assert {"revise.dispatch", "revise.sandbox", "revise.capability"} <= names

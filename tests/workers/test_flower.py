"""Flower shows this stack only (issue 29, item 6): events and remote control are per
queue prefix, so a worker of another stack on the same Redis db is not listed; the
periodic sweep stays out of the task list; Flower is never reachable from other hosts
without authentication, and REVISE_FLOWER_AUTH is its basic auth."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from broker.settings import SettingsError
from workers.config import FlowerSettings
from workers.flower import flower_options, listen_problem

from .conftest import ROOT, SCRIPTS, free_port
from .test_procfile import get_json


def test_loopback_without_auth_listens_where_the_settings_say() -> None:
    environ: dict[str, str] = {}
    options = flower_options(FlowerSettings(port=6001), ["--max_tasks=10"], environ)
    assert options == ["--address=127.0.0.1", "--port=6001", "--max_tasks=10"]
    assert environ == {}


@pytest.mark.parametrize("address", ["0.0.0.0", "10.1.2.3", "flower.example.org", "::"])
def test_an_exposed_flower_without_auth_is_refused_in_one_line(address: str) -> None:
    with pytest.raises(SettingsError, match="REVISE_FLOWER_AUTH=user:password") as refused:
        flower_options(FlowerSettings(address=address), [], {})
    assert "\n" not in refused.value.message and address in refused.value.message


def test_auth_goes_to_flower_in_its_environment_never_on_the_command_line() -> None:
    environ: dict[str, str] = {}
    options = flower_options(FlowerSettings(address="0.0.0.0", auth="ops:s3cret"),
                             [], environ)
    assert environ == {"FLOWER_BASIC_AUTH": "ops:s3cret"}
    assert not any("s3cret" in option for option in options)
    # Flower's own options count as authentication too (OAuth with --auth).
    assert flower_options(FlowerSettings(address="0.0.0.0"),
                          ["--auth=.*@example\\.org"], {})[0] == "--address=0.0.0.0"


def test_in_a_container_it_listens_on_every_interface_and_the_published_address_is_judged(
        ) -> None:
    assert flower_options(FlowerSettings(), ["--in-container"], {}) == [
        "--address=0.0.0.0", "--port=5555"]
    with pytest.raises(SettingsError):
        flower_options(FlowerSettings(address="0.0.0.0"), ["--in-container"], {})


def test_a_password_without_a_user_is_refused() -> None:
    with pytest.raises(SettingsError, match="REVISE_FLOWER_AUTH: write user:password"):
        FlowerSettings(auth="s3cret")


# ---- a port already in use -----------------------------------------------------------------


def test_a_port_in_use_is_named_with_how_to_find_who_holds_it() -> None:
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        port = held.getsockname()[1]
        for options in (["--address=127.0.0.1", f"--port={port}"],
                        ["--address", "", "--port", str(port)]):
            problem = listen_problem(options)
            assert problem is not None and "already in use" in problem, options
            assert f"REVISE_FLOWER_PORT={port}" in problem and "ss -ltnp" in problem
    assert listen_problem(["--address=127.0.0.1", f"--port={port}"]) is None  # free again


def test_flower_on_a_port_in_use_stops_in_one_line(tmp_path) -> None:
    """It printed Tornado's 37-line traceback (OSError: [Errno 98] Address already in use),
    and honcho stopped the stack without a word of the earlier stack still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVISE_")}
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "workers.flower"], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, env={
                                  **env, "PYTHONPATH": str(ROOT),
                                  "REVISE_HOME": str(tmp_path / "home"),
                                  "REVISE_REDIS_URL": "redis://127.0.0.1:1/12",
                                  "REVISE_FLOWER_PORT": str(port)})
    assert done.returncode != 0 and done.stdout == ""
    assert done.stderr.splitlines() == [
        f"error: Flower cannot listen on 127.0.0.1:{port}: the address is already in use "
        f"(REVISE_FLOWER_PORT={port}), most likely by the Flower of an earlier stack still "
        f"running; find it with `ss -ltnp 'sport = :{port}'` or `pgrep -af 'workers.flower|"
        "celery -A workers.app'` and stop it, or set REVISE_FLOWER_PORT to a free port"]


# ---- a real Flower beside two stacks on one Redis db --------------------------------------


def test_flower_shows_its_own_stack_only_and_no_sweeps(make_stack) -> None:
    ours = make_stack(reconcile_interval=0.5)
    theirs = make_stack()  # another prefix, the same Redis db
    theirs.worker("capabilities", index=1, concurrency=1)
    for role in ("dispatch", "sandbox", "capabilities"):
        ours.worker(role, concurrency=2)
    ours.worker("reconcile", concurrency=1, beat=True)
    port = free_port()
    ours._spawn([sys.executable, "-m", "workers.flower"], "flower",
                env={"REVISE_FLOWER_PORT": str(port), "REVISE_FLOWER_AUTH": "ops:s3cret"})
    ours.wait_ready(120)
    theirs.wait_ready(120)
    report = ours.client.submit((SCRIPTS / "e3_v2.py").read_text(), {}, None,
                                "flowered").wait(120)
    assert report["status"] == "succeeded", report["error"]
    time.sleep(3)  # six sweeps at least

    base, auth = f"http://127.0.0.1:{port}/api", ("ops", "s3cret")
    assert httpx.get(f"{base}/workers", timeout=5).status_code == 401
    deadline = time.monotonic() + 60
    while set(workers := get_json(f"{base}/workers?refresh=1", auth)) < set(ours.names):
        assert time.monotonic() < deadline, sorted(workers)
        time.sleep(0.5)
    assert set(workers) == set(ours.names), "a worker of another prefix is listed"
    names = {task.get("name") for task in get_json(f"{base}/tasks", auth).values()}
    assert {"revise.dispatch", "revise.sandbox"} <= names
    assert "revise.reconcile.sweep" not in names
    swept = (ours.tmp_path / "reconcile0.log").read_text().count("revise.reconcile.sweep[")
    assert swept >= 4, "the sweep still runs, out of Flower's sight"

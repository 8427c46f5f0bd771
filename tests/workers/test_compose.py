"""compose.yaml describes the Procfile's roles; `docker compose config` validates it
where the compose plugin exists, a structure check does everywhere."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
import yaml

from .conftest import ROOT

ROLES = {"dispatcher": "dispatch", "sandbox": "sandbox", "broker": "capabilities",
         "reconciler": "reconcile"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _compose_plugin() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_plugin(), reason="no docker compose plugin here")
def test_docker_compose_config_accepts_it() -> None:
    env = {**os.environ, "REVISE_FLOWER_AUTH": "admin:secret"}
    result = subprocess.run(["docker", "compose", "-f", str(ROOT / "compose.yaml"), "config",
                             "-q"], capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr


def test_services_images_and_queues(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "flower", *ROLES}
    assert services["redis"]["image"].startswith("redis:")
    assert services["postgres"]["image"].startswith("postgres:")
    ours = {name: svc for name, svc in services.items() if name not in ("redis", "postgres")}
    for name, svc in ours.items():
        assert svc["build"] == {"context": ".", "dockerfile": "workers/Dockerfile"}, name
        assert svc["image"] == "revise-worker:latest", name
        launcher = ["python", "-m", "workers.flower"] if name == "flower" else [
            "celery", "-A", "workers.app"]
        assert svc["command"][:3] == launcher, name
    assert (ROOT / "workers" / "Dockerfile").is_file()
    for role, queue in ROLES.items():
        command = services[role]["command"]
        assert command[command.index("-Q") + 1] == queue
        assert command[command.index("-n") + 1] == f"{role}@%h"
    assert "-B" in services["reconciler"]["command"]


def test_sandbox_socket_replicas_and_shared_home(compose: dict) -> None:
    services = compose["services"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in services["sandbox"]["volumes"]
    assert not any("docker.sock" in v for name, svc in services.items() if name != "sandbox"
                   for v in svc.get("volumes", []))
    assert services["broker"]["deploy"]["replicas"] == 2
    for role in ROLES:
        env = services[role]["environment"]
        assert env["REVISE_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["REVISE_REDIS_URL"].startswith("redis://redis:")
        assert env["REVISE_LEDGER_BACKEND"] == "redis"
        assert any(v.endswith(":/var/lib/revise") for v in services[role]["volumes"])


def test_procfile_has_the_same_roles() -> None:
    lines = [line for line in (ROOT / "Procfile").read_text().splitlines()
             if line and not line.startswith("#")]
    procs = dict(line.split(":", 1) for line in lines)
    assert set(procs) == {*ROLES, "flower"}
    for role, queue in ROLES.items():
        assert f"-Q ${{REVISE_CELERY_QUEUE_PREFIX}}{queue} " in procs[role]
        # honcho numbers scaled copies (broker.1, broker.2): distinct workers in Flower
        assert f"-n ${{HONCHO_PROCESS_NAME:-{role}}}@%h" in procs[role]
    assert " -B " in procs["reconciler"]


def test_workers_never_run_as_root(compose: dict) -> None:
    services = compose["services"]
    for name in (*ROLES, "flower"):
        user = str(services[name].get("user", ""))
        assert user and user.split(":")[0] not in ("root", "0"), (name, user)
    assert services["sandbox"]["group_add"], "the Docker socket's group, not root"
    dockerfile = (ROOT / "workers" / "Dockerfile").read_text().splitlines()
    users = [line.split()[1] for line in dockerfile if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    procfile = (ROOT / "Procfile").read_text()
    assert "sudo -u revise" in procfile  # how to do the same on a host

"""compose.yaml describes the Procfile's roles; `docker compose config` (or Debian's
`docker-compose config`) validates it, a structure check reads it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import _missing_service

from .conftest import ROOT

ROLES = {"dispatcher": "dispatch", "sandbox": "sandbox", "broker": "capabilities",
         "reconciler": "reconcile"}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _compose_command() -> list[str] | None:
    """`docker compose` (the plugin) or Debian's `docker-compose` (tests/run.sh installs it)."""
    if shutil.which("docker") is not None and subprocess.run(
            ["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    return None


def _config(*extra: str, **variables: str) -> subprocess.CompletedProcess[str]:
    """`compose config` in a clean environment: no REVISE_* but ``variables``."""
    command = _compose_command()
    if command is None:
        _missing_service("neither `docker compose` nor `docker-compose` is installed "
                         "(tests/run.sh installs docker-compose with apt)")
    assert command is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("REVISE_")} | variables
    return subprocess.run([*command, "-f", str(ROOT / "compose.yaml"), "-p", "revise",
                           *extra, "config"], capture_output=True, text=True, env=env,
                          cwd=ROOT)


@pytest.mark.parametrize("profile", [[], ["--profile", "s3"]])
def test_compose_config_accepts_it(profile: list[str]) -> None:
    result = _config(*profile)
    assert result.returncode == 0, result.stderr
    services = yaml.safe_load(result.stdout)["services"]
    assert {"redis", "postgres", "broker"} <= set(services)
    assert services.get("s3", {"profiles": ["s3"]})["profiles"] == ["s3"]  # only on request


def test_flower_is_published_on_loopback_unless_told_and_then_with_its_auth() -> None:
    flower = yaml.safe_load(_config().stdout)["services"]["flower"]
    assert _published(flower) == ("127.0.0.1", "5555")
    assert flower["environment"]["REVISE_FLOWER_AUTH"] == ""
    assert flower["command"] == ["python", "-m", "workers.flower", "--in-container"]
    shown = _config(REVISE_FLOWER_ADDRESS="0.0.0.0", REVISE_FLOWER_PORT="8555",
                    REVISE_FLOWER_AUTH="ops:s3cret")
    flower = yaml.safe_load(shown.stdout)["services"]["flower"]
    assert _published(flower) == ("0.0.0.0", "8555")
    assert flower["environment"]["REVISE_FLOWER_ADDRESS"] == "0.0.0.0"
    assert flower["environment"]["REVISE_FLOWER_AUTH"] == "ops:s3cret"


def _published(service: dict) -> tuple[str, str]:
    """(host address, host port) of the service's one published port, in either form
    `compose config` prints (long syntax from docker compose, short from 1.29)."""
    (port,) = service["ports"]
    if isinstance(port, dict):
        return port["host_ip"], str(port["published"])
    address, published, _ = str(port).rsplit(":", 2)
    return address, published


def test_the_broker_scales_against_shared_stores() -> None:
    """`up --scale broker=3`: nothing in the broker pins one container or one host."""
    result = _config()
    assert result.returncode == 0, result.stderr
    broker = yaml.safe_load(result.stdout)["services"]["broker"]
    assert "container_name" not in broker and "ports" not in broker
    assert not broker.get("volumes"), "a broker worker needs no host directory"
    assert broker["environment"]["REVISE_ARTIFACT_STORE"] == "database"
    assert broker["environment"]["REVISE_DATABASE_URL"].startswith("postgresql+psycopg://")
    s3 = _config("--profile", "s3")
    assert yaml.safe_load(s3.stdout)["services"]["broker"]["environment"][
        "REVISE_S3_ENDPOINT_URL"] == "http://s3:9000"


def test_services_images_and_queues(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"redis", "postgres", "s3", "s3-bucket", "flower", *ROLES}
    assert services["redis"]["image"].startswith("redis:")
    assert services["postgres"]["image"].startswith("postgres:")
    assert services["s3"]["profiles"] == ["s3"] == services["s3-bucket"]["profiles"]
    ours = {name: svc for name, svc in services.items()
            if name not in ("redis", "postgres", "s3", "s3-bucket")}
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
        assert env["REVISE_ARTIFACT_STORE"] == "${REVISE_ARTIFACT_STORE:-database}"
        shared = any(v.endswith(":/var/lib/revise") for v in services[role]["volumes"])
        assert shared == (role != "broker"), role


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


def test_the_procfile_names_every_setting_its_roles_read_and_loses_none() -> None:
    """Each ``${REVISE_...}`` a role expands is in the header's list, and the recipe for an
    unprivileged user hands every setting over whole (.env), not a list of names."""
    text = (ROOT / "Procfile").read_text()
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    expanded = set(re.findall(r"\$\{(REVISE_[A-Z_]+)", body))
    assert expanded and expanded <= set(re.findall(r"REVISE_[A-Z_]+", header))
    assert "--preserve-env" not in text and "sudo -u revise honcho start" in text


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

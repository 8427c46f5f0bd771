"""A real Celery stack per test: workers (or the whole Procfile) as subprocesses.

Each stack has its own PostgreSQL database (the ``postgres_url`` fixture), the
test Redis db and a unique queue prefix, so no test sees another's tasks, and
its processes are terminated (process group) in teardown.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.providers import ProviderLog
from broker.settings import Settings
from sandbox.runner import kill_processes_mentioning
from workers.client import Client
from workers.config import WorkerSettings
from workers.context import WorkerContext

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"
HOST = socket.gethostname()


def script(name: str) -> str:
    return (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")


def _sandbox_kind() -> str:
    from sandbox.select import docker_ready

    return "docker" if docker_ready(Settings()) else "process"


def wait_for_workers(app: Any, names: list[str], timeout: float, logs: Path) -> None:
    """Until every worker named answers a ping; AssertionError after ``timeout``."""
    deadline = time.monotonic() + timeout
    missing = set(names)
    while missing:
        for reply in app.control.ping(destination=sorted(missing), timeout=0.5):
            missing -= set(reply)
        if missing and time.monotonic() > deadline:
            raise AssertionError(f"workers not ready: {sorted(missing)}; logs in {logs}")


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group, then SIGKILL what has not ended within 15 s."""
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


class Stack:
    def __init__(self, tmp_path: Path, database_url: str, redis_url: str,
                 **queue: Any) -> None:
        self.tmp_path = tmp_path
        self.prefix = f"t{uuid.uuid4().hex[:10]}-"
        self.env = {
            **os.environ, "PYTHONPATH": str(ROOT), "REVISE_HOME": str(tmp_path / "home"),
            "REVISE_DATABASE_URL": database_url, "REVISE_REDIS_URL": redis_url,
            "REVISE_SANDBOX": _sandbox_kind(),
            "REVISE_CELERY_QUEUE_PREFIX": self.prefix,
        }
        for key, value in queue.items():
            self.env[f"REVISE_CELERY_{key.upper()}"] = str(value)
        self.settings = Settings(home=tmp_path / "home", database_url=database_url,
                                 redis_url=redis_url)
        self.queue = WorkerSettings(queue_prefix=self.prefix, **queue)
        self.client = Client(self.settings, queue=self.queue)
        self.context = WorkerContext(self.settings, self.queue)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.names: list[str] = []

    # ---- processes ------------------------------------------------------------------------

    def _spawn(self, command: list[str] | str, log_name: str,
               env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        with open(self.tmp_path / f"{log_name}.log", "wb") as log:  # the child keeps its fd
            proc = subprocess.Popen(command, cwd=ROOT, env={**self.env, **(env or {})},
                                    stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    shell=isinstance(command, str))
        self.procs.append(proc)
        return proc

    def worker(self, role: str, *, pool: str = "threads", concurrency: int = 4,
               index: int = 0, env: dict[str, str] | None = None,
               beat: bool = False, host: str | None = None) -> subprocess.Popen[bytes]:
        """``host``: run the worker as that host, in its own UTS namespace with that
        hostname and its own REVISE_HOME (``tmp_path/<host>``); see ``tests/multihost``."""
        name = f"{role}{index}-{self.prefix}@{host or HOST}"
        self.names.append(name)
        command = [sys.executable, "-m", "celery", "-A", "workers.app", "worker",
                   "-Q", self.client.app.routing.queue(role), "-n", name,
                   "--pool", pool, "-c", str(concurrency), "-l", "INFO",
                   "--without-mingle", "--without-gossip",
                   *(["-B", "-s", str(self.tmp_path / f"beat{index}")] if beat else [])]
        if host is not None:
            command = as_host(host, command)
            env = {"REVISE_HOME": str(self.tmp_path / host), **(env or {})}
        return self._spawn(command, f"{role}{index}", env)

    def procfile(self, flower_port: int, **scale: int) -> subprocess.Popen[bytes]:
        """``honcho start`` on the Procfile; ``scale`` = copies per role (``broker=3``)."""
        self.env["REVISE_FLOWER_PORT"] = str(flower_port)
        self.names += [f"{role}.{n}@{HOST}" for role in ("dispatcher", "sandbox", "broker",
                                                          "reconciler")
                       for n in range(1, scale.get(role, 1) + 1)]
        concurrency = [f"-c{','.join(f'{k}={v}' for k, v in scale.items())}"] if scale else []
        return self._spawn(["honcho", "start", "-f", str(ROOT / "Procfile"),
                            "-d", str(ROOT), *concurrency], "honcho")

    def wait_ready(self, timeout: float = 30.0) -> None:
        wait_for_workers(self.client.app, self.names, timeout, self.tmp_path)

    def stop(self) -> None:
        stop_processes(self.procs)
        kill_processes_mentioning([str(self.tmp_path)])
        self.client.close()
        if "store" in self.context.__dict__:
            self.context.store.close()

    # ---- reading what happened ---------------------------------------------------------------

    @property
    def store(self):
        return self.context.store

    def provider_log(self) -> list[dict[str, Any]]:
        return ProviderLog(self.settings.provider_log_path).read()

    def events(self, run_id: str, kind: str) -> list[Any]:
        return [e for e in self.store.list_events(run_id) if e.kind == kind]


@pytest.fixture
def make_stack(tmp_path: Path, postgres_url: str, redis_url: str) -> Iterator[Any]:
    stacks: list[Stack] = []

    def make(**queue: Any) -> Stack:
        stack = Stack(tmp_path, postgres_url, redis_url, **queue)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()


def finished_run(make: Any, run_id: str) -> tuple[Stack, Any]:
    """A whole stack (one sandbox slot) that ran ``crash_seq`` to success as ``run_id``,
    and that revision's job."""
    stack = make()
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready(120)
    report = stack.client.submit(script("crash_seq"), {}, Envelope(), run_id).wait(120)
    assert report["status"] == "succeeded", report["error"]
    return stack, stack.store.job_for_revision(run_id, 1)


def as_host(host: str, command: list[str]) -> list[str]:
    """``command`` in a new UTS namespace whose hostname is ``host`` (needs root)."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', host, *command]


def wait_for(predicate, timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]

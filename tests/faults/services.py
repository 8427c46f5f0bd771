"""A private PostgreSQL cluster and a private Redis that a test may stop and start.

The shared servers of the machine are never touched: each is started from its
binaries under a temporary directory on a free port. PostgreSQL's ``initdb``
refuses root, so as root the cluster runs as the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.conftest import _missing_service


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_port(port: int, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"{what} did not listen on 127.0.0.1:{port} within {timeout:.0f} s")


class PrivatePostgres:
    def __init__(self) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not found:
            _missing_service("PostgreSQL server binaries (/usr/lib/postgresql/*/bin) are missing")
        self.bin = Path(found[-1]).parent
        # Its own directory under /tmp: pytest's tmp dirs are private to their user, and
        # the cluster may run as another one.
        self.root = Path(tempfile.mkdtemp(prefix="revise-faults-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._run([str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                   "-U", "postgres", "--no-sync"])

    def _run(self, command: list[str]) -> None:
        done = subprocess.run([*self._as_user, *command], capture_output=True, timeout=180,
                              text=True)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(command)} failed: {done.stderr or done.stdout}")

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c max_connections=300")
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-l",
                   str(self.root / "server.log"), "-o", options, "-w", "-t", "120", "start"])
        _wait_port(self.port, 60, "PostgreSQL")

    def stop(self) -> None:
        """A fast shutdown (what a restart by an operator does): connections are cut."""
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w",
                   "-t", "120", "stop"])

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        engine = create_engine(self.url, isolation_level="AUTOCOMMIT")
        try:
            with engine.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            engine.dispose()
        return self.database_url(name)

    def close(self) -> None:
        try:
            self._run([str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                       "stop"])
        except AssertionError:
            pass
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """``redis-server`` with nothing on disk: a restart loses every key."""

    def __init__(self, root: Path) -> None:
        if shutil.which("redis-server") is None:
            _missing_service("redis-server is not installed")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        with open(self.root / "redis.log", "ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.root)],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_port(self.port, 30, "Redis")

    def kill(self) -> None:
        """SIGKILL: everything Redis held (queues, results, leases, ledger) is gone."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def close(self) -> None:
        self.kill()

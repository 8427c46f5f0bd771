"""Three hosts in separate network, mount and UTS namespaces (issue 25), not only UTS.

Host A (dispatcher, sandbox workers, reconciler) and host B (broker workers) each run in
a network namespace of their own (``ip netns``), reaching this machine only over a veth
pair: their 127.0.0.1 is their own loopback, where nothing listens. Redis and
PostgreSQL listen on this machine's 127.0.0.1, so the test forwards one TCP port per
service on each veth's host address to them (what a router between hosts does). Each
host also has its own mount namespace with its REVISE_HOME on a tmpfs nobody else sees,
and its own hostname. The test process and its ``revise`` commands are the third host
(its own REVISE_HOME). Artifacts live in the run store's database (the default on
PostgreSQL), so nothing at all is shared but Redis and PostgreSQL.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import shutil
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from broker.envelope import Envelope
from tests.conftest import _missing_service
from tests.workers.conftest import Stack, script

from .conftest import HOST_A, HOST_B, revise

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

SHOTS = {"shots": ["a", "b", "c", "d"]}  # N = 4 calls; the last one fails


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise OSError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


class Forwarder:
    """Listens on ``address``: each connection is piped to ``target`` (a port on this
    machine's loopback), in threads of the test process."""

    def __init__(self, address: str, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server((address, 0))
        self.port = self.listener.getsockname()[1]
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True, name="forward").start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        with selectors.DefaultSelector() as sel, a, b:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while not self.closed.is_set():
                for key, _ in sel.select(1.0):
                    try:
                        data = key.fileobj.recv(65536)  # type: ignore[union-attr]
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return

    def close(self) -> None:
        self.closed.set()
        self.listener.close()


class NetHost:
    """A network namespace joined to this machine by a veth pair (``10.213.<n>.0/30``)."""

    def __init__(self, name: str, number: int) -> None:
        self.netns = f"rv{uuid.uuid4().hex[:6]}-{name[-1]}"
        self.veth = self.netns.replace("-", "")[:12]
        self.address = f"10.213.{number}.1"  # this machine's end
        self.forwarders: list[Forwarder] = []
        _ip("netns", "add", self.netns)
        try:
            _ip("link", "add", f"{self.veth}h", "type", "veth", "peer", "name", f"{self.veth}n")
            _ip("link", "set", f"{self.veth}n", "netns", self.netns)
            _ip("addr", "add", f"{self.address}/30", "dev", f"{self.veth}h")
            _ip("link", "set", f"{self.veth}h", "up")
            inside = ["netns", "exec", self.netns, "ip"]
            _ip(*inside, "addr", "add", f"10.213.{number}.2/30", "dev",
                f"{self.veth}n")
            _ip(*inside, "link", "set", f"{self.veth}n", "up")
            _ip(*inside, "link", "set", "lo", "up")
        except OSError:
            self.close()
            raise

    def forward(self, url: str) -> str:
        """``url`` (a service on this machine's loopback) as this host reaches it."""
        parts = urlsplit(url)
        forwarder = Forwarder(self.address, (parts.hostname or "127.0.0.1", parts.port or 0))
        self.forwarders.append(forwarder)
        netloc = parts.netloc.rsplit("@", 1)
        hostport = f"{self.address}:{forwarder.port}"
        return urlunsplit(parts._replace(
            netloc=f"{netloc[0]}@{hostport}" if len(netloc) == 2 else hostport))

    def command(self, hostname: str, home: Path, argv: list[str]) -> list[str]:
        """``argv`` in this network namespace, in a new mount and UTS namespace whose
        hostname is ``hostname`` and whose ``home`` is a tmpfs of its own."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts",
                "--propagation", "private", "sh", "-c",
                'hostname "$0" && mount -t tmpfs -o size=64m tmpfs "$1" && shift && '
                'exec "$@"', hostname, str(home), *argv]

    def close(self) -> None:
        for forwarder in self.forwarders:
            forwarder.close()
        subprocess.run(["ip", "link", "del", f"{self.veth}h"], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True)


class NamespacedStack(Stack):
    """Workers of ``host`` run in that host's namespaces with the URLs it reaches."""

    hosts: dict[str, tuple[NetHost, dict[str, str]]]
    _next: tuple[NetHost, str, Path] | None = None

    def namespaced(self, host: str, role: str, **options: Any) -> subprocess.Popen[bytes]:
        net, urls = self.hosts[host]
        home = self.tmp_path / host
        home.mkdir(exist_ok=True)
        self._next = (net, host, home)
        try:
            return self.worker(role, env={**urls, "REVISE_HOME": str(home)}, **options)
        finally:
            self._next = None

    def _spawn(self, command: list[str] | str, log_name: str,
               env: dict[str, str] | None = None) -> Any:
        wrap = self._next
        if wrap is not None and isinstance(command, list):
            net, host, home = wrap
            self.names[-1] = self.names[-1].rsplit("@", 1)[0] + f"@{host}"
            command = list(command)
            command[command.index("-n") + 1] = self.names[-1]
            command = net.command(host, home, command)
        return super()._spawn(command, log_name, env)


@pytest.fixture
def hosts() -> Iterator[list[NetHost]]:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        _missing_service("separate network namespaces need root and iproute2 (ip netns)")
    made: list[NetHost] = []
    try:
        for number, name in enumerate((HOST_A, HOST_B), start=1):
            made.append(NetHost(name, 200 + number))
    except OSError as exc:
        for host in made:
            host.close()
        _missing_service(f"cannot make a network namespace with a veth pair: {exc}")
    yield made
    for host in made:
        host.close()


def _reaches(net: NetHost, address: str, port: int) -> bool:
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=2)"
    return subprocess.run(["ip", "netns", "exec", net.netns, "python3", "-c", probe],
                          capture_output=True).returncode == 0


def test_three_hosts_in_separate_network_and_mount_namespaces(
        hosts: list[NetHost], tmp_path: Path, postgres_url: str, redis_url: str) -> None:
    started = time.monotonic()
    stack = NamespacedStack(tmp_path, postgres_url, redis_url)
    try:
        stack.hosts = {}
        for name, net in zip((HOST_A, HOST_B), hosts, strict=True):
            stack.hosts[name] = (net, {"REVISE_DATABASE_URL": net.forward(postgres_url),
                                       "REVISE_REDIS_URL": net.forward(redis_url)})
        redis_port = urlsplit(redis_url).port or 6379
        for net in hosts:  # the services are not on a host's own loopback
            assert not _reaches(net, "127.0.0.1", redis_port), "not a network of its own"
            assert _reaches(net, net.address, net.forwarders[-1].port)
        stack.namespaced(HOST_A, "dispatch")
        stack.namespaced(HOST_A, "sandbox", pool="prefork", concurrency=2)
        stack.namespaced(HOST_A, "reconcile", concurrency=1, beat=True)
        stack.namespaced(HOST_B, "capabilities", concurrency=4)
        stack.wait_ready(90)

        first = stack.client.submit(script("fanout_v1"), SHOTS, Envelope(), "R").wait(120)
        assert first["status"] == "failed" and first["calls"]["executed"] == 4, first

        answers = tmp_path / "answers.jsonl"
        answers.write_text(json.dumps({"purpose": "repair", "output": "```python\n"
                                       + script("fanout_repaired") + "\n```"}) + "\n")
        operator = tmp_path / "operator"
        repaired = revise(stack, operator, "repair", "--run-id", "R", "--model",
                          f"recorded:{answers}", "--execute", "--timeout", "120", "--json")
        assert (repaired["via"], repaired["outcome"]) == ("queue", "succeeded"), repaired
        run = repaired["run"]
        assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)

        owners = {a.owner.split(":")[1] for a in stack.store.list_attempts("R")}
        assert owners == {HOST_B}, owners
        # Each host's REVISE_HOME was a tmpfs of its own mount namespace: nothing of it
        # reached this machine's directory (the provider log stayed on host B).
        for host in (HOST_A, HOST_B):
            assert list((tmp_path / host).iterdir()) == [], f"{host} wrote to a shared disk"
        attempts = revise(stack, tmp_path / "third", "attempts", "--run-id", "R", "--json")
        sent = [a for a in attempts["attempts"] if a["sent_at"] and a["answered_at"]]
        assert len(sent) == len(SHOTS["shots"]) + 1, attempts
        third = tmp_path / "third"
        for artifact in run["result"]:
            got = revise(stack, third, "artifact", "get", artifact, "-o",
                         str(third / "image.png"), "--json")
            data = (third / "image.png").read_bytes()
            assert f"sha256:{hashlib.sha256(data).hexdigest()}" == artifact, got
        # The same request (identity and payload) dispatched twice would be a duplicate;
        # the repair's call at the failed identity is another request (another size).
        per_identity = Counter((str(a.identity), a.digest) for a in stack.store.list_attempts(
            "R") if a.sent_at is not None)
        duplicates = sum(n - 1 for n in per_identity.values() if n > 1)
        # The failed call (999x999) is answered with a provider error: paid nothing.
        committed = [s for s in stack.store.list_slots("R") if s.committed_at is not None]
        assert duplicates == 0 and len(committed) == len(SHOTS["shots"])
        stuck = [r.revision for r in stack.store.list_revisions("R") if r.status == "running"]
        assert stuck == []
    finally:
        stack.stop()
    print(f"\nFAULT three-hosts-netns: dispatched {len(sent)}, committed {len(committed)}, "
          f"duplicates {duplicates}, lost 0, stuck {len(stuck)}; fanout + repair with every "
          f"call owned by {HOST_B}, {len(run['result'])} artifacts fetched from a third "
          f"home; hosts in their own network, mount and UTS namespaces; "
          f"{time.monotonic() - started:.1f} s")

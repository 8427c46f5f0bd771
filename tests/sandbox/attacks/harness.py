"""Run an attack and judge containment from the host side; the one copy of the judge, used
by the corpus tests and by the acceptance run (``python -m tests.acceptance --attacks``).

The judge never trusts what the script returned: it looks at the host. Contained means:
the run ended in an allowed status (and named error) within its deadline; neither secret
token (the victim file's, the provider key in the host's environment) appears in the run
report or in any file under REVISE_HOME; the victim dir is unchanged and no planted file
exists; nothing connected to the canary port and the Redis key was never set; no process
carrying the attack's marker is left; at most ``attack.calls`` provider executions; the run
is not left ``running``; and a normal run right after it succeeds on the same host objects.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.envelope import Envelope, SandboxLimits
from broker.providers import ProviderLog
from broker.records import RunStatus
from sandbox.channel import ready

from .corpus import Attack

ENV_SECRET = f"sk-attack-env-{uuid.uuid4().hex}"
SECRET_ENV_NAMES = ("REVISE_PROVIDER_API_KEY", "OPENAI_API_KEY")
NORMAL = ('async def orchestrate(ctx, args):\n'
          '    text = await ctx.run("text.generate", {"prompt": "after the attack"})\n'
          '    return {"ok": True, "text": text}\n')
FD_SLACK = 16  # connection pools may open a few
PLANTED_ELSEWHERE = (Path("/planted"), Path("/usr/planted"), Path("/etc/planted"))


def run_unchecked(services: Any, run_id: str, text: str, args: Any, envelope: Envelope
                  ) -> dict[str, Any]:
    """Annotate and gate but skip the checker: the test-only path to hostile scripts, which
    proves that the sandbox holds alone when the checker is bypassed (the product has no
    such path: neither the CLI nor the queue can reach one)."""
    import ast

    from orchestrator.admission import Admission
    from orchestrator.annotate import annotate
    from orchestrator.gate import check_gate, frozen_sites
    from orchestrator.pipeline import Admitted, args_json
    from orchestrator.report import RunReport
    from orchestrator.source import decode_source

    store = services.store
    source = decode_source(text)
    store.ensure_run(run_id)
    annotated = annotate(source.text, ast.parse(source.text))
    admission = Admission(annotated.text, annotated.sites,
                          check_gate(frozen_sites(store.list_slots(run_id)), annotated.sites))
    revision = store.add_revision(run_id, source.text, source.digest)
    admitted = Admitted(run_id, revision, source, args_json(args, envelope), admission,
                        RunReport(run_id=run_id, revision=revision))
    return services.pipeline().execute(admitted, envelope).to_json()


class Canary:
    """A TCP port on 127.0.0.1 that counts every connection made to it.

    Reading ``connections`` first accepts whatever waits in the backlog, so a connection
    the kernel completed is counted even when the serving thread has not run since.
    """

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port: int = self._sock.getsockname()[1]
        self._count = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def connections(self) -> int:
        self._accept_waiting(0)
        return self._count

    def _accept_waiting(self, wait: float) -> None:
        with self._lock:
            while ready(self._sock, wait):
                conn, _ = self._sock.accept()
                self._count += 1
                conn.close()
                wait = 0

    def _serve(self) -> None:
        while not self._done.is_set():
            self._accept_waiting(0.2)

    def close(self) -> None:
        self._done.set()
        self._thread.join(2)
        self._sock.close()


def marked_processes(marker: str) -> list[int]:
    """Host processes (other than this one) whose command line carries ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked_processes(marker)


def files_holding(root: Path, tokens: tuple[str, ...]) -> list[str]:
    """Files under ``root`` that contain any of ``tokens``."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                data = path.read_bytes()
            except OSError:
                continue
            hits += [str(path) for token in tokens if token.encode() in data]
    return hits


def containers_left() -> bool:
    """Does a sandbox container of this process still exist (running or not)?"""
    import docker

    from sandbox.docker_runner import LABEL_OWNER, _owner

    client = docker.from_env()
    try:
        return bool(client.containers.list(
            all=True, filters={"label": f"{LABEL_OWNER}={_owner()}"}))
    finally:
        client.close()


@dataclass
class Victim:
    """Host files the attack must neither read nor change, in the test's temp dir."""

    root: Path
    token: str = field(default_factory=lambda: f"victim-{uuid.uuid4().hex}")

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.secret = self.root / "secret.txt"
        self.secret.write_text(f"the host's secret: {self.token}\n")
        self.secret.chmod(0o600)
        (self.root / "keep.txt").write_text("keep me\n")

    def snapshot(self) -> dict[str, tuple[int, str]]:
        return {str(p.relative_to(self.root)): (p.lstat().st_mode,
                hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "")
                for p in sorted(self.root.rglob("*"))}


def attack_args(attack: Attack, victim: Victim, home: Path, canary: Canary,
                marker: str) -> dict[str, Any]:
    return {"secret_file": str(victim.secret), "victim": str(victim.root), "home": str(home),
            "host_pid": os.getpid(), "marker": marker, "canary": canary.port,
            "redis_key": f"revise-attack-{marker}", "tmpl": "%(secret_file)s"}


def envelope_for(attack: Attack) -> Envelope:
    return Envelope(sandbox=SandboxLimits(timeout_seconds=attack.timeout, **attack.limits))


def _redis_has(key: str) -> bool:
    try:
        import redis
    except ImportError:
        return False
    for db in {0, int(os.environ.get("REVISE_TEST_REDIS_DB", "15"))}:
        try:
            conn = redis.Redis(host="127.0.0.1", port=6379, db=db, socket_timeout=2)
            try:
                if conn.exists(key):
                    return True
            finally:
                conn.close()
        except redis.RedisError:
            return False
    return False


def provider_calls(services: Any, run_id: str) -> int:
    return sum(entry.get("run_id") == run_id
               for entry in ProviderLog(services.settings.provider_log_path).read())


@dataclass
class Verdict:
    report: dict[str, Any]
    elapsed: float
    problems: list[str]

    @property
    def contained(self) -> bool:
        return not self.problems


def judge(attack: Attack, services: Any, run_id: str, report: dict[str, Any],
          elapsed: float, *, victim: Victim, before: dict[str, tuple[int, str]],
          canary: Canary, canary_before: int, marker: str, slack: float) -> list[str]:
    problems: list[str] = []
    status, error = report.get("status"), (report.get("error") or {}).get("type")
    if status not in attack.statuses:
        problems.append(f"status {status} ({error}), expected one of {sorted(attack.statuses)}")
    if attack.error is not None and error != attack.error:
        problems.append(f"error {error}, expected {attack.error}")
    if elapsed > attack.timeout + slack:
        problems.append(f"took {elapsed:.1f}s, deadline {attack.timeout}s")
    tokens = (victim.token, ENV_SECRET)
    text = json.dumps(report)
    problems += [f"the report holds a secret ({t[:12]}...)" for t in tokens if t in text]
    problems += [f"a secret landed in {hit}" for hit in
                 files_holding(services.settings.home, tokens)]
    if victim.snapshot() != before:
        problems.append("the victim dir changed")
    planted = [str(p) for p in (services.settings.home / "planted", *PLANTED_ELSEWHERE)
               if p.exists()]
    if planted:
        problems.append(f"planted files: {planted}")
    if canary.connections > canary_before:
        problems.append(f"{canary.connections - canary_before} connection(s) reached the "
                        "host's canary port")
    if _redis_has(f"revise-attack-{marker}"):
        problems.append("the attack's key is in the host's Redis")
    left = wait_gone(marker)
    if left:
        problems.append(f"processes left: {left}")
    calls = provider_calls(services, run_id)
    if calls > attack.calls:
        problems.append(f"{calls} provider executions, at most {attack.calls} allowed")
    run = services.store.get_run(run_id)
    if run is not None and run.status is RunStatus.RUNNING:
        problems.append("the run was left running")
    return problems


def follow_up(services: Any, run_id: str) -> list[str]:
    """A normal, checked run right after the attack, on the same host objects."""
    report = services.pipeline().run(f"{run_id}-after", NORMAL, {}, Envelope(
        sandbox=SandboxLimits(timeout_seconds=30))).to_json()
    if report["status"] != "succeeded":
        return [f"the follow-up run ended {report['status']}: {report.get('error')}"]
    return []


def run_attack(attack: Attack, services: Any, *, checked: bool, victim: Victim,
               canary: Canary, slack: float) -> Verdict:
    """Run ``attack`` (checked: the production path; else checker bypassed) and judge it."""
    marker = f"atkmark{uuid.uuid4().hex}"
    run_id = f"atk-{attack.name}-{marker[-8:]}"
    home = services.settings.home
    args = attack_args(attack, victim, home, canary, marker)
    before, canary_before = victim.snapshot(), canary.connections
    fds_before = len(os.listdir("/proc/self/fd"))
    started = time.monotonic()
    if checked:
        report = services.pipeline().run(run_id, attack.script, args,
                                         envelope_for(attack)).to_json()
    else:
        report = run_unchecked(services, run_id, attack.script, args, envelope_for(attack))
    elapsed = time.monotonic() - started
    problems = judge(attack, services, run_id, report, elapsed, victim=victim, before=before,
                     canary=canary, canary_before=canary_before, marker=marker, slack=slack)
    problems += follow_up(services, run_id)
    leaked = len(os.listdir("/proc/self/fd")) - fds_before
    if leaked > FD_SLACK:  # e.g. descriptors the sandbox passed over the socket
        problems.append(f"the host holds {leaked} more open files after the run")
    return Verdict(report, elapsed, problems)

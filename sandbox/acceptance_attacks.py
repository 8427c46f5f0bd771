"""Acceptance checks from the attack corpus: hostile scripts, checker bypassed, judged
from the host.

``python -m sandbox.acceptance --attacks`` runs a subset of ``tests/sandbox/attacks``
(the full corpus is a test suite): host files, secrets, the host's network, namespaces,
privileges, processes that outlive the run or kill their host, and socket protocol
abuse. Each attack runs with the checker bypassed (``run_unchecked``) and is contained
when: the run ends in an allowed status (with the named error where one is expected)
within its deadline; neither secret (a 0600 victim file's token in a temp dir, a
provider key in the host's environment) appears in the report or any file under
REVISE_HOME; the victim dir is unchanged; nothing reached a canary TCP port on the host;
no process carrying the attack's marker is left; and a normal, checked run right after
it succeeds.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.envelope import Envelope, SandboxLimits
from broker.settings import Settings
from sandbox.acceptance_pipeline import run_unchecked, script

Result = tuple[str, bool, str]
STOPPED = frozenset({"stopped"})
ENDED = frozenset({"stopped", "failed", "succeeded"})
NORMAL = ('async def orchestrate(ctx, args):\n'
          '    return await ctx.run("text.generate", {"prompt": "after the attack"})\n')


@dataclass(frozen=True)
class AttackCheck:
    name: str
    body: str  # after ``script``'s escape to the real builtins (imp, open, os, json, ...)
    statuses: frozenset[str] = ENDED
    error: str | None = None
    timeout: float = 8.0
    limits: tuple[tuple[str, int], ...] = ()
    checked: bool = False  # the production path (checker on): the body is the whole script


_TRY = '''
Exception = real["Exception"]
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = type(exc).__name__
'''
_LIBC = _TRY + '''
ctypes = imp("ctypes")
libc = ctypes.CDLL(None, use_errno=True)
def syscall(number, *arguments):
    ctypes.set_errno(0)
    return [libc.syscall(number, *arguments), ctypes.get_errno()]
'''
_DAEMON = '''
sys = imp("sys")
argv = [sys.executable, "-c", "import time\\nwhile True: time.sleep(0.2)", args["marker"]]
'''
_CHANNEL = '''
if args.get("never"):
    await ctx.run("text.generate", {"prompt": "whitelisted"})
sched = g["_SCHEDULER"]
sock, nonce, struct = sched.channel._sock, sched.nonce, imp("struct")
def raw(data):
    sock.sendall(struct.pack(">I", len(data)) + data)
'''

ATTACK_CHECKS: list[AttackCheck] = [
    AttackCheck("host files", _TRY + '''
for path in ("/etc/shadow", args["secret_file"], args["home"]):
    attempt(path, lambda: os.listdir(path) if os.path.isdir(path) else open(path).read())
return out'''),
    AttackCheck("host environ and memory", _TRY + '''
for name in ("environ", "mem"):
    attempt(name, lambda: open(f"/proc/{args['host_pid']}/{name}", "rb").read(64).decode())
return out'''),
    AttackCheck("host network", _TRY + '''
socket = imp("socket")
for port in (6379, 5432, args["canary"]):
    attempt(str(port), lambda: socket.create_connection(("127.0.0.1", port), timeout=1).recv(1))
return out'''),
    AttackCheck("namespaces, ptrace, mount", _LIBC + '''
attempt("setns", lambda: syscall(308, os.open("/proc/1/ns/net", os.O_RDONLY), 0))
attempt("unshare", lambda: syscall(272, 0x10000000))
attempt("ptrace", lambda: syscall(101, 16, os.getppid(), 0, 0))
attempt("mount", lambda: syscall(165, b"none", b"/tmp", b"tmpfs", 0, 0))
attempt("setuid", lambda: os.setuid(0))
return out'''),
    AttackCheck("writes outside the work dir", _TRY + '''
for path in (args["victim"] + "/planted", args["home"] + "/planted", "/usr/planted"):
    attempt(path, lambda: open(path, "a").write("pwned"))
return out'''),
    AttackCheck("fork bomb", _DAEMON + '''
made = 0
for i in range(300):
    try:
        if os.fork() == 0:
            os.execv(argv[0], argv)
        made += 1
    except OSError:
        break
return made''', limits=(("pids", 32),)),
    AttackCheck("setsid daemon", _DAEMON + '''
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(argv[0], argv)
    os._exit(0)
imp("time").sleep(0.3)
return "daemonized"'''),
    AttackCheck("kill the parent", _TRY + '''
for pid in (os.getppid(), args["host_pid"], -1):
    attempt(str(pid), lambda: os.kill(pid, 9))
return out'''),
    AttackCheck("docker socket", _TRY + '''
socket = imp("socket")
def api():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("/var/run/docker.sock")
    s.sendall(b"GET /containers/json HTTP/1.0\\r\\n\\r\\n")
    return s.recv(100).decode("latin-1")
attempt("docker", api)
return out'''),
    AttackCheck("deep JSON frame", _CHANNEL + '''
raw(b"[" * 200000 + b"]" * 200000)
imp("time").sleep(4)
return "not stopped"''', STOPPED, "SandboxProtocolError"),
    AttackCheck("oversized length header", _CHANNEL + '''
sock.sendall(struct.pack(">I", 0xFFFFFFFF) + b"{")
imp("time").sleep(4)
return "not stopped"''', STOPPED, "SandboxProtocolError"),
    AttackCheck("lone surrogate frame", _CHANNEL + '''
raw(b'{"t": "batch", "nonce": "' + nonce.encode() + b'", "frames": [], "x": "\\\\ud800"}')
imp("time").sleep(4)
return "not stopped"''', STOPPED, "SandboxProtocolError"),
    AttackCheck("batch flood past the deadline", _CHANNEL + '''
body = json.dumps({"t": "batch", "nonce": nonce, "frames": [], "more": True}).encode()
chunk = (struct.pack(">I", len(body)) + body) * 20000
time = imp("time")
end = time.monotonic() + 20
while time.monotonic() < end:
    sock.sendall(chunk)
return "not stopped"''', STOPPED, "SandboxTimeout", timeout=3.0),
    AttackCheck("half-closed socket", _CHANNEL + '''
sock.shutdown(imp("socket").SHUT_WR)
imp("time").sleep(10)
return "not stopped"''', frozenset({"stopped", "failed"}), timeout=4.0),
    AttackCheck("race branch with an unhashable site", '''
if args.get("never"):
    await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
sched = g["_SCHEDULER"]
sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
    {"seq": 1, "kind": "race_lookup", "site": "orchestrate/if0/#0", "path": [],
     "occurrence": 0, "branches": [{"site": ["unhashable"]}]}]})
imp("time").sleep(1)
return "not stopped"''', frozenset({"succeeded", "stopped"})),
    AttackCheck("checked script's lone surrogate", 'async def orchestrate(ctx, args):\n'
                '    return {"x": chr(55296)}\n', STOPPED, "SandboxProtocolError",
                checked=True),
]


class Canary:
    """A TCP port on 127.0.0.1 that counts every connection made to it."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self.connections = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:  # the accept timeout, or the socket closed
                continue
            self.connections += 1
            conn.close()

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


def wait_gone(marker: str, seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while marked_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked_processes(marker)


@contextmanager
def _secret_env(secret: str) -> Iterator[None]:
    saved = os.environ.get("REVISE_PROVIDER_API_KEY")
    os.environ["REVISE_PROVIDER_API_KEY"] = secret
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("REVISE_PROVIDER_API_KEY", None)
        else:
            os.environ["REVISE_PROVIDER_API_KEY"] = saved


def _problems(check: AttackCheck, report: dict[str, Any], elapsed: float, services: Any,
              tokens: tuple[str, ...], victim: Path, before: bytes, canary: Canary,
              canary_before: int, marker: str) -> list[str]:
    problems = []
    error = (report.get("error") or {}).get("type")
    if report.get("status") not in check.statuses:
        problems.append(f"status {report.get('status')} ({error})")
    if check.error is not None and error != check.error:
        problems.append(f"error {error}, expected {check.error}")
    if elapsed > check.timeout + 20:
        problems.append(f"took {elapsed:.0f}s")
    if any(token in json.dumps(report) for token in tokens):
        problems.append("a secret in the report")
    problems += [f"a secret in {hit}" for hit in files_holding(services.settings.home, tokens)]
    if sorted(p.name for p in victim.iterdir()) != ["secret.txt"] or \
            (victim / "secret.txt").read_bytes() != before:
        problems.append("the victim dir changed")
    if (services.settings.home / "planted").exists():
        problems.append("a file planted in REVISE_HOME")
    if canary.connections > canary_before:
        problems.append("a connection reached the host")
    if wait_gone(marker):
        problems.append("processes left after the run")
    after = services.pipeline().run(f"after-{marker[-8:]}", NORMAL, {}, Envelope(
        sandbox=SandboxLimits(timeout_seconds=30)))
    if not after.succeeded:
        problems.append("the follow-up normal run failed")
    return problems


def _one(check: AttackCheck, services: Any, tmp: Path, secret: str, canary: Canary
         ) -> tuple[bool, str]:
    marker = f"accattack{uuid.uuid4().hex}"
    victim = tmp / f"victim-{marker[-8:]}"
    victim.mkdir()
    token = f"victim-{uuid.uuid4().hex}"
    (victim / "secret.txt").write_text(token)
    (victim / "secret.txt").chmod(0o600)
    before = (victim / "secret.txt").read_bytes()
    args = {"secret_file": str(victim / "secret.txt"), "victim": str(victim),
            "home": str(services.settings.home), "host_pid": os.getpid(), "marker": marker,
            "canary": canary.port}
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=check.timeout,
                                              **dict(check.limits)))
    run_id = f"attack-{marker[-8:]}"
    canary_before = canary.connections
    started = time.monotonic()
    if check.checked:
        report = services.pipeline().run(run_id, check.body, args, envelope).to_json()
    else:
        report = run_unchecked(services, run_id, script(check.body), args, envelope)
    problems = _problems(check, report, time.monotonic() - started, services,
                         (token, secret), victim, before, canary, canary_before, marker)
    error = report.get("error") or {}
    return not problems, "; ".join(problems) or f"{report.get('status')} {error.get('type', '')}"


def run_attack_checks(kind: str, settings: Settings | None = None, *,
                      only: str | None = None) -> list[Result]:
    from broker.settings import SandboxKind
    from orchestrator.embedded import open_services
    from sandbox.select import select_runner

    base = settings or Settings()
    secret = f"sk-acceptance-attack-{uuid.uuid4().hex}"
    results: list[Result] = []
    canary = Canary()
    try:
        with _secret_env(secret), tempfile.TemporaryDirectory(prefix="revise-attacks-") as tmp:
            run_settings = base.model_copy(update={
                "home": Path(tmp) / "home", "database_url": None, "sandbox": SandboxKind(kind)})
            services = open_services(run_settings, runner=select_runner(run_settings))
            try:
                for check in ATTACK_CHECKS:
                    name = f"{kind} attack: {check.name}"
                    if only and only not in name:
                        continue
                    try:
                        ok, detail = _one(check, services, Path(tmp), secret, canary)
                    except Exception as exc:  # a check that crashes is a failed check
                        ok, detail = False, f"{type(exc).__name__}: {exc}"
                    results.append((name, ok, detail[:70]))
            finally:
                services.close()
    finally:
        canary.close()
    return results

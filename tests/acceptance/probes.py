"""Isolation probes: hostile programs (real Python, not checked scripts) in a sandbox the
production runner starts exactly as it starts a job's (``launch``: a fresh RPC directory,
the host listening on its socket), judged by what they could do from the inside and
what is left on the host afterwards."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.envelope import SandboxLimits
from broker.settings import Settings
from tests.sandbox.attacks.harness import containers_left, marked_processes

REPO = Path(__file__).resolve().parents[2]
Result = tuple[str, bool, str]  # (check name, passed, detail)
SECRET = "sk-acceptance-secret-0000"


# Probe bodies the sandbox tests run too (``out`` is the probe's JSON report).
FORK_BOMB = """
import time
made = 0
try:
    for _ in range(500):
        if os.fork() == 0:
            time.sleep(3)
            os._exit(0)
        made += 1
except OSError as exc:
    out["error"] = exc.errno
out["made"] = made
"""
RPC_DIR_READ_ONLY = """
out["listing"] = sorted(os.listdir("/rpc"))
try:
    open("/rpc/planted", "w").close()
    out["write"] = "written"
except OSError as exc:
    out["write"] = exc.errno
"""


@dataclass
class Outcome:
    """What one probe did: exit code, its JSON report, the output tail, and the host's view."""

    code: int | None
    out: dict[str, Any]
    output: str
    timed_out: bool
    received: dict[str, Any] | None  # the message the probe sent over /rpc/rpc.sock
    leftover: list[int]  # host processes still carrying the probe's token after cleanup


@dataclass(frozen=True)
class Probe:
    name: str
    body: str  # Python source that fills the dict ``out``; ``host`` holds host facts
    passes: Callable[[Outcome], bool]
    limits: dict[str, Any] = field(default_factory=dict)
    wait: float = 60.0


_STATUS = "dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)"

PROBES: list[Probe] = [
    Probe("network isolation", '''
        import socket
        lines = open("/proc/net/dev").readlines()[2:]
        out["ifaces"] = sorted(line.split(":")[0].strip() for line in lines)
        for port in (6379, 5432):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                out[str(port)] = "connected"
            except OSError as exc:
                out[str(port)] = exc.errno
        try:
            socket.getaddrinfo("pypi.org", 443)
            out["dns"] = "resolved"
        except OSError:
            out["dns"] = "failed"
        ''', lambda o: o.out.get("ifaces") == ["lo"] and o.out["dns"] == "failed"
        and "connected" not in (o.out["6379"], o.out["5432"])),
    Probe("read-only root", '''
        for path in ("/usr/evil", "/opt/revise/runtime.py", "/opt/revise/evil", "/etc/passwd",
                     "/evil", "/dev/evil"):
            try:
                open(path, "a").close()
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.errno
        ''', lambda o: bool(o.out) and "written" not in o.out.values()),
    Probe("RPC directory read-only", RPC_DIR_READ_ONLY,
          lambda o: o.out.get("listing") == ["rpc.sock"] and o.out["write"] == 30),
    Probe("RPC socket connectable", '''
        import socket, struct
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("/rpc/rpc.sock")
        body = json.dumps({"t": "hello", "uid": os.getuid()}).encode()
        s.sendall(struct.pack(">I", len(body)) + body)
        size = struct.unpack(">I", s.recv(4))[0]
        out["reply"] = json.loads(s.recv(size))
        ''', lambda o: o.received == {"t": "hello", "uid": o.out.get("reply", {}).get("uid")}
        and o.out["reply"].get("t") == "ack"),
    Probe("non-root", '''
        out["ids"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), *os.getgroups()]
        ''', lambda o: bool(o.out.get("ids")) and 0 not in o.out["ids"]),
    Probe("seccomp denial", f'''
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for name, call in (("unshare", lambda: libc.unshare(0x10000000)),
                           ("ptrace", lambda: libc.ptrace(0, 0, 0, 0)),
                           ("mount", lambda: libc.mount(b"x", b"/tmp", b"tmpfs", 0, 0))):
            ctypes.set_errno(0)
            out[name] = [call(), ctypes.get_errno()]
        out["mode"] = {_STATUS}["Seccomp"].strip()
        ''', lambda o: o.out.get("mode") == "2" and all(
            o.out[k] == [-1, 1] for k in ("unshare", "ptrace", "mount"))),
    Probe("capabilities dropped", f'''
        out.update({{k: v.strip() for k, v in {_STATUS}.items() if k.startswith("Cap")}})
        ''', lambda o: len(o.out) == 5 and all(int(v, 16) == 0 for v in o.out.values())),
    Probe("no-new-privileges", f'out["nnp"] = {_STATUS}["NoNewPrivs"].strip()',
          lambda o: o.out.get("nnp") == "1"),
    Probe("memory limit kill", '''
        hog = [bytearray(8 * 1024 * 1024) for _ in range(50)]
        print("survived")
        ''', lambda o: "survived" not in o.output and o.code not in (0, None),
          limits={"memory_mb": 64}),
    Probe("pids limit", FORK_BOMB,
          lambda o: o.out.get("made", 999) < 32 and o.out.get("error") == 11,
          limits={"pids": 32}),
    Probe("CPU/timeout kill", "while True:\n    pass\n",
          lambda o: o.timed_out and o.code is not None and not o.leftover, wait=3.0),
    Probe("bounded output tail", "for i in range(50000):\n    print('line', i)\n",
          lambda o: o.code == 0 and len(o.output.encode()) <= 8192
          and o.output.endswith("line 49999\n{}\n")),
    Probe("no credentials or host env", '''
        out["env"] = dict(os.environ)
        out["pid1"] = open("/proc/1/environ", "rb").read().decode("latin-1")
        ''', lambda o: bool(o.out) and SECRET not in o.output
        and not any(k.startswith("REVISE_") or "KEY" in k for k in o.out["env"])),
    Probe("no host files", '''
        for path in (host["home"], host["source"], "/var/run/docker.sock", "/root",
                     "/etc/shadow"):
            try:
                out[path] = sorted(os.listdir(path))[:3] if os.path.isdir(path) else \\
                    open(path, "rb").read(16).decode("latin-1")
            except OSError as exc:
                out[path] = exc.errno
        ''', lambda o: bool(o.out) and all(isinstance(v, int) for v in o.out.values())),
    Probe("no host processes", '''
        out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        for name in ("environ", "mem"):
            try:
                open(f"/proc/{host['pid']}/{name}", "rb").read(16)
                out[name] = "read"
            except OSError as exc:
                out[name] = exc.errno
        ''', lambda o: 0 < len(o.out.get("pids", ())) <= 3
        and isinstance(o.out["environ"], int) and isinstance(o.out["mem"], int)),
    Probe("daemon dies with the sandbox", '''
        import time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.2)
            os._exit(0)
        time.sleep(0.5)
        out["daemonized"] = True
        ''', lambda o: o.out.get("daemonized") is True and not o.leftover),
    Probe("killing the parent is harmless", '''
        import signal
        for name, pid in (("parent", os.getppid()), ("host", host["pid"])):
            try:
                os.kill(pid, signal.SIGKILL)
                out[name] = "sent"
            except OSError as exc:
                out[name] = exc.errno
        out["alive"] = True
        ''', lambda o: o.out.get("alive") is True and o.out["host"] == 3),
]


def _probe_source(probe: Probe, token: str, host: dict[str, Any]) -> str:
    prelude = (f"# {token}\nimport json, os, sys\nout = {{}}\n"
               f"host = json.loads({json.dumps(host)!r})\n")
    return prelude + textwrap.dedent(probe.body) + "\nprint(json.dumps(out), flush=True)\n"


def _serve(listener: socket.socket, done: threading.Event, got: list[dict[str, Any]]) -> None:
    """The host side of the socket check: one framed message in, one framed answer out."""
    listener.settimeout(0.2)
    while not done.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        with conn:
            conn.settimeout(10)
            size = int.from_bytes(conn.recv(4), "big")
            got.append(json.loads(conn.recv(min(size, 65536))))
            body = json.dumps({"t": "ack", "uid": got[-1].get("uid")}).encode()
            conn.sendall(len(body).to_bytes(4, "big") + body)
        return


def run_probe(runner_for: Callable[[tuple[str, ...]], Any], python: str, probe: Probe,
              workdir: Path, host: dict[str, Any]) -> Outcome:
    token = f"revise-acceptance-{uuid.uuid4().hex}"
    command = (python, "-I", "-S", "-B", "-c", _probe_source(probe, token, host))
    runner = runner_for(command)
    limits = SandboxLimits(**{"timeout_seconds": 30.0, **probe.limits})
    launched = runner.launch(f"acceptance-{token[-8:]}", workdir / token, limits)
    done, got = threading.Event(), list[dict[str, Any]]()
    server = threading.Thread(target=_serve, args=(launched.listener, done, got), daemon=True)
    server.start()
    try:
        code = launched.sandbox.wait(probe.wait)
        timed_out = code is None
        if timed_out:
            launched.sandbox.kill()
            code = launched.sandbox.wait(10)
        output = launched.sandbox.output()
    finally:
        done.set()
        server.join(5)
        launched.sandbox.cleanup()
        launched.listener.close()
    try:
        out = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {}
    return Outcome(code, out if isinstance(out, dict) else {}, output, timed_out,
                   got[0] if got else None, marked_processes(token))


def _runner_factory(kind: str, settings: Settings) -> tuple[Callable[..., Any], str]:
    if kind == "docker":
        from sandbox.docker_runner import DockerRunner

        return (lambda command: DockerRunner(settings, command=command)), "python3"
    from sandbox.runner import ProcessRunner

    python = ProcessRunner().profile(SandboxLimits()).python  # preflight: fails closed
    return (lambda command: ProcessRunner(command=command)), python


def run_isolation_checks(kind: str, settings: Settings | None = None, *,
                         only: str | None = None) -> list[Result]:
    settings = settings or Settings()
    runner_for, python = _runner_factory(kind, settings)
    results: list[Result] = []
    os.environ["REVISE_PROVIDER_API_KEY"] = SECRET  # must never reach a sandbox
    with tempfile.TemporaryDirectory(prefix="revise-acceptance-") as tmp:
        host = {"pid": os.getpid(), "home": tmp, "source": str(REPO)}
        for probe in PROBES:
            if only and only not in f"{kind}: {probe.name}":
                continue
            try:
                outcome = run_probe(runner_for, python, probe, Path(tmp), host)
                ok = bool(probe.passes(outcome))
                detail = json.dumps(outcome.out)[:70] if outcome.out else outcome.output[-70:]
            except Exception as exc:  # a check that crashes is a failed check
                ok, detail = False, f"{type(exc).__name__}: {exc}"[:70]
            results.append((f"{kind}: {probe.name}", ok, detail.replace("\n", " ")))
    removed = "docker: container removed after kill"
    if kind == "docker" and (not only or only in removed):
        results.append((removed, not containers_left(),
                        "no labelled container of this process left"))
    return results

"""The host treats the sandbox socket as hostile: every surprise stops the run, in time.

A probe process stands in for the sandbox runtime and speaks the protocol wrongly
on purpose; the host must end the revision as ``stopped`` with a named error, pay
nothing, leave no run ``running`` and keep the deadline, whatever the probe does.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from broker.envelope import Envelope, SandboxLimits
from broker.providers import ProviderLog
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from sandbox.child import ChildSandbox
from sandbox.job import SandboxJob, open_rpc_dir
from sandbox.launch import Launched

SCRIPT = '''async def orchestrate(ctx, args):
    return await ctx.run("text.generate", {"prompt": "hello"})
'''
SITE = "orchestrate/#0"

PRELUDE = '''
import json, socket, struct, sys, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect(sys.argv[1])
def send(obj):
    data = json.dumps(obj).encode()
    sock.sendall(struct.pack(">I", len(data)) + data)
def raw(data):
    sock.sendall(struct.pack(">I", len(data)) + data)
buf = b""
def recv():
    global buf
    while len(buf) < 4:
        buf += sock.recv(65536)
    n = struct.unpack(">I", buf[:4])[0]
    while len(buf) < 4 + n:
        buf += sock.recv(65536)
    msg, buf = json.loads(buf[4:4 + n]), buf[4 + n:]
    return msg
job = recv()
nonce = job["nonce"]
def call(**fields):
    frame = {"seq": 1, "kind": "call", "site": SITE, "path": [], "occurrence": 0,
             "capability": "text.generate", "payload": {"prompt": "hello"}, "take": 1}
    frame.update(fields)
    return frame
'''.replace("SITE", repr(SITE))


class ProbeRunner:
    """Launches a Python probe instead of the runtime (a real process, a real socket)."""

    kind = "probe"
    isolation = "none: a test probe"
    warnings: tuple[str, ...] = ()

    def __init__(self, body: str) -> None:
        self.code = PRELUDE + textwrap.dedent(body)

    def launch(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        listener = open_rpc_dir(rpc_dir)
        job = SandboxJob(run_id, rpc_dir, limits)
        log_path = rpc_dir.parent / f"{rpc_dir.name}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen([sys.executable, "-c", self.code, str(job.socket_path)],
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return Launched(job, listener, ChildSandbox(proc, tempfile.TemporaryDirectory(),
                                                    log_path))

    def close(self) -> None:
        pass


@pytest.fixture
def probe_run(tmp_path: Path):
    def run(body: str, timeout: float = 5, paid: int = 0) -> tuple[dict, float, object]:
        settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
        services = open_services(settings, runner=ProbeRunner(body))
        try:
            started = time.monotonic()
            report = services.pipeline().run(
                "probe", SCRIPT, {}, Envelope(sandbox=SandboxLimits(timeout_seconds=timeout)))
            elapsed = time.monotonic() - started
            run = services.store.get_run("probe")
            assert str(run.status) != "running"
            assert len(ProviderLog(settings.provider_log_path).read()) == paid
            return report.to_json(), elapsed, run
        finally:
            services.close()

    return run


HOSTILE = {
    "oversized length": ('sock.sendall(struct.pack(">I", 1 << 30)); time.sleep(30)',
                         "SandboxProtocolError"),
    "not json": ('raw(b"{nope"); time.sleep(30)', "SandboxProtocolError"),
    "not utf-8": ('raw(b"\\xff\\xfe"); time.sleep(30)', "SandboxProtocolError"),
    "deep nesting": ('raw(b"[" * 200000 + b"]" * 200000); time.sleep(30)',
                     "SandboxProtocolError"),
    "nesting past the bound": (
        'send({"t": "batch", "nonce": nonce, "frames": [call(payload={"prompt": "x", '
        '"deep": eval("[" * 100 + "]" * 100)})]}); time.sleep(30)', "SandboxProtocolError"),
    "a list message": ('send([1, 2]); time.sleep(30)', "SandboxProtocolError"),
    "NaN constant": ('raw(b\'{"t": NaN}\'); time.sleep(30)', "SandboxProtocolError"),
    "wrong nonce": ('send({"t": "batch", "nonce": "x" * 32, "frames": [call()]}); '
                    'time.sleep(30)', "SandboxProtocolError"),
    "unknown message": ('send({"t": "shell", "nonce": nonce}); time.sleep(30)',
                        "SandboxProtocolError"),
    "site not annotated": ('send({"t": "batch", "nonce": nonce, "frames": '
                           '[call(site="orchestrate/#9")]}); time.sleep(30)',
                           "SandboxProtocolError"),
    "capability not the site's": (
        'send({"t": "batch", "nonce": nonce, "frames": [call(capability="image.generate", '
        'payload={"prompt": "p"})]}); time.sleep(30)', "SandboxProtocolError"),
    "skipped occurrence": ('send({"t": "batch", "nonce": nonce, "frames": [call(occurrence=1)]})'
                           '; time.sleep(30)', "SandboxProtocolError"),
    "replayed occurrence": (
        'send({"t": "batch", "nonce": nonce, "frames": [call(), call(seq=2)]}); '
        'time.sleep(30)', "SandboxProtocolError"),
    "seq going back": ('send({"t": "batch", "nonce": nonce, "frames": [call(seq=0)]}); '
                       'time.sleep(30)', "SandboxProtocolError"),
    "negative path": ('send({"t": "batch", "nonce": nonce, "frames": [call(path=[-1])]}); '
                      'time.sleep(30)', "SandboxProtocolError"),
    "string path": ('send({"t": "batch", "nonce": nonce, "frames": [call(path=["0"])]}); '
                    'time.sleep(30)', "SandboxProtocolError"),
    "bool occurrence": ('send({"t": "batch", "nonce": nonce, "frames": '
                        '[call(occurrence=False)]}); time.sleep(30)', "SandboxProtocolError"),
    "take zero": ('send({"t": "batch", "nonce": nonce, "frames": [call(take=0)]}); '
                  'time.sleep(30)', "SandboxProtocolError"),
    "frame not an object": ('send({"t": "batch", "nonce": nonce, "frames": ["x"]}); '
                            'time.sleep(30)', "SandboxProtocolError"),
    "race commit without lookup": (
        'send({"t": "batch", "nonce": nonce, "frames": [call(kind="race_commit")]}); '
        'time.sleep(30)', "SandboxProtocolError"),
    "second connection": (
        'other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); other.connect(sys.argv[1])'
        '; time.sleep(30)', "SandboxProtocolError"),
    "silence": ("time.sleep(60)", "SandboxTimeout"),
    "half a header then silence": ('sock.sendall(b"\\x00\\x00"); time.sleep(60)',
                                   "SandboxTimeout"),
    "a result over the size limit": (
        'raw(b\'{"t": "result", "nonce": "\' + nonce.encode() + b\'", "ok": true, '
        '"result": "\' + b"x" * (9 << 20) + b\'"}\'); time.sleep(30)',
        "SandboxProtocolError"),
    "exit without a result": ("sys.exit(0)", "SandboxError"),
    "killed by a signal": ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                           "SandboxError"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_sandbox_ends_the_run_stopped_and_pays_nothing(probe_run, name) -> None:
    body, error = HOSTILE[name]
    report, elapsed, _ = probe_run(body)
    assert report["status"] == "stopped", report
    assert report["error"]["type"] == error, report["error"]
    assert report["calls"]["executed"] == 0
    assert elapsed < 15, "the deadline holds whatever the sandbox does"


def test_a_well_behaved_probe_gets_its_answer(probe_run) -> None:
    report, _, _ = probe_run('''
        send({"t": "batch", "nonce": nonce, "frames": [call()]})
        answer = recv()
        send({"t": "result", "nonce": nonce, "ok": True, "result": answer["result"]["text"],
              "logs": []})
        time.sleep(30)
        ''', paid=1)
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 1


def test_an_interrupt_wakes_a_receive_at_once(tmp_path: Path) -> None:
    """The run stopped (another thread latched it): the session thread waiting on its
    sandbox returns at once instead of at its next idle look."""
    import socket
    import threading

    from sandbox.channel import Channel

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "s.sock"))
    listener.listen(1)
    peer = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    peer.connect(str(tmp_path / "s.sock"))
    channel = Channel(listener, deadline=time.monotonic() + 60, message_bytes=1 << 20)
    try:
        assert channel.accept(5)
        threading.Timer(0.2, channel.interrupt).start()
        started = time.monotonic()
        assert channel.receive(30) is None
        assert time.monotonic() - started < 10  # woken, not timed out
        assert channel.receive(0.3) is None  # the wake was used up: a quiet wait again
    finally:
        peer.close()
        channel.close()

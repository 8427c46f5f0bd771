"""The bubblewrap process sandbox, from the inside: real bwrap, real probes, no mocks.

Each test runs a small probe (``python -c``, through the runner's ``command=``
override) in a sandbox made from the production profile and checks one
property; escapes are attempted, not assumed.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from broker.envelope import SandboxLimits
from broker.errors import SandboxUnavailable
from sandbox.job import remove_rpc_dir
from sandbox.process_profile import ProcessSettings
from sandbox.runner import ProcessRunner
from tests.acceptance.probes import FORK_BOMB
from tests.sandbox.attacks.harness import marked_processes


def _probe(body: str) -> str:
    """Probe source that prints one JSON object (the dict ``out``) on its last line."""
    return ("import json, os, sys\nout = {}\n" + textwrap.dedent(body)
            + "\nprint(json.dumps(out), flush=True)")


def _result(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def _uid_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])


def test_the_rpc_socket_is_reachable_and_the_directory_read_only(process_python, rpc_dirs):
    code = _probe("""
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("/rpc/rpc.sock")
        s.sendall(b"hello from inside")
        out["reply"] = s.recv(100).decode()
        out["listing"] = sorted(os.listdir("/rpc"))
        for path in ("/rpc/planted", "/rpc/rpc.sock"):
            try:
                open(path, "w").close()
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.errno
    """)
    runner = ProcessRunner(command=(process_python, "-I", "-S", "-B", "-c", code))
    launched = runner.launch("rpc-test", rpc_dirs(), SandboxLimits())
    try:
        launched.listener.settimeout(30)
        conn, _ = launched.listener.accept()
        with conn:
            assert conn.recv(100) == b"hello from inside"
            conn.sendall(b"hello from the host")
        assert launched.sandbox.wait(30) == 0, launched.sandbox.output()
        result = _result(launched.sandbox.output())
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()
        remove_rpc_dir(launched.job.rpc_dir)
    assert result["reply"] == "hello from the host"
    assert result["listing"] == ["rpc.sock"]
    assert result["/rpc/planted"] == 30  # EROFS
    assert result["/rpc/rpc.sock"] == 6  # ENXIO: a socket is connected to, never opened


def test_host_secrets_and_files_are_out_of_reach(run_process_probe, tmp_path):
    home = tmp_path / "revise-home"
    home.mkdir()
    (home / "victim.txt").write_text("host only")
    code, output, _ = run_process_probe(_probe(f"""
        host_pid = {os.getpid()}
        for path in ("/etc/shadow", f"/proc/{{host_pid}}/environ", f"/proc/{{host_pid}}/mem",
                     "{home}/victim.txt", "/root/.bashrc"):
            try:
                out[path] = open(path, "rb").read(64).decode("latin-1")
            except OSError as exc:
                out[path] = exc.errno
        try:
            out["home"] = os.listdir("{home}")
        except OSError as exc:
            out["home"] = exc.errno
        out["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        out["root"] = sorted(os.listdir("/"))
    """))
    result = _result(output)
    assert code == 0, output
    assert "host only" not in output
    for key, value in result.items():
        if key not in ("pids", "root"):
            assert isinstance(value, int), (key, value)  # an errno, never content
    assert result["pids"] == [1, 2]  # bwrap's init and the probe: nothing of the host
    assert set(result["root"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "dev",
                                   "opt", "proc", "rpc", "tmp", "usr"}, result["root"]


def test_no_network_no_namespaces(run_process_probe):
    code, output, _ = run_process_probe(_probe("""
        import ctypes, socket
        for port in (6379, 5432):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                out[str(port)] = "connected"
            except OSError as exc:
                out[str(port)] = exc.errno
        for family in (socket.AF_INET6, 16, 17, 40):  # NETLINK, PACKET, VSOCK
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
                out[f"af{family}"] = "opened"
            except OSError as exc:
                out[f"af{family}"] = exc.errno
        out["interfaces"] = sorted(line.split(":")[0].strip()
                                   for line in open("/proc/net/dev").readlines()[2:])
        libc = ctypes.CDLL(None, use_errno=True)
        for name, call in (("unshare", lambda: libc.unshare(0x40000000)),
                           ("setns", lambda: libc.setns(os.open("/proc/self/ns/net", 0), 0))):
            ctypes.set_errno(0)
            out[name] = [call(), ctypes.get_errno()]
        a, b = socket.socketpair()  # AF_UNIX stays available (asyncio needs it)
        out["socketpair"] = a.family == socket.AF_UNIX
    """))
    result = _result(output)
    assert code == 0, output
    assert result["6379"] == result["5432"] == 97  # EAFNOSUPPORT: no IP socket at all
    assert {result[k] for k in result if k.startswith("af")} == {97}
    assert result["interfaces"] == ["lo"]
    assert result["unshare"] == [-1, 1] and result["setns"] == [-1, 1]  # EPERM
    assert result["socketpair"] is True


def test_seccomp_denies_escape_syscalls(run_process_probe):
    code, output, _ = run_process_probe(_probe("""
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        numbers = {"ptrace": 101, "process_vm_readv": 310, "mount": 165, "keyctl": 250,
                   "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "chroot": 161,
                   "pivot_root": 155, "init_module": 175, "open_by_handle_at": 304,
                   "clone3": 435, "io_uring_setup": 425}
        if os.uname().machine != "x86_64":
            numbers = {}
        for name, nr in numbers.items():
            ctypes.set_errno(0)
            out[name] = [libc.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno()]
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        ctypes.set_errno(0)
        out["pdeathsig"] = [libc.prctl(1, 0, 0, 0, 0), ctypes.get_errno()]
        out["set_name"] = libc.prctl(15, b"probe", 0, 0, 0)
        status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
        for field in ("NoNewPrivs", "Seccomp", "CapEff", "CapPrm", "CapBnd", "CapAmb"):
            out[field] = status[field].strip()
    """))
    result = _result(output)
    assert code == 0, output
    assert result["NoNewPrivs"] == "1" and result["Seccomp"] == "2"
    for cap in ("CapEff", "CapPrm", "CapBnd", "CapAmb"):
        assert int(result[cap], 16) == 0, (cap, result[cap])
    assert result["fork"] == 7
    assert result["pdeathsig"] == [-1, 1] and result["set_name"] == 0
    if os.uname().machine == "x86_64":
        assert result.pop("clone3") == [-1, 38]  # ENOSYS: libc falls back to clone
        for name in ("ptrace", "process_vm_readv", "mount", "keyctl", "bpf",
                     "perf_event_open", "userfaultfd", "chroot", "pivot_root", "init_module",
                     "open_by_handle_at", "io_uring_setup"):
            assert result[name] == [-1, 1], (name, result[name])


def test_writes_only_in_tmp(run_process_probe, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    victim.chmod(0o666)
    tmp_path.chmod(0o777)  # even a world-writable host directory stays out of reach
    code, output, _ = run_process_probe(_probe(f"""
        for path in ("{victim}", "/usr/evil", "/evil", "/opt/revise/runtime.py",
                     "/opt/revise/runtime.pyc", "/opt/revise/evil", "/dev/evil",
                     "/dev/shm/evil", "/proc/evil"):
            try:
                with open(path, "a") as fh:
                    fh.write("owned")
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.errno
        with open("/tmp/scratch", "w") as fh:
            fh.write("fine")
        out["tmp"] = open("/tmp/scratch").read()
        out["cwd"] = os.getcwd()
    """))
    result = _result(output)
    assert code == 0, output
    assert victim.read_text() == "untouched"
    assert result.pop("tmp") == "fine" and result.pop("cwd") == "/tmp"
    assert "written" not in result.values(), result


def test_fork_bomb_hits_the_pids_limit(run_process_probe):
    code, output, _ = run_process_probe(_probe(FORK_BOMB), SandboxLimits(pids=48),
                                        timeout=60)
    result = _result(output)
    assert code == 0, output
    assert result["made"] < 48 and result["error"] == 11  # EAGAIN


def test_concurrent_sandboxes_have_their_own_pids_limit(run_process_probe, process_python,
                                                        rpc_dirs):
    hog = ProcessRunner(command=(process_python, "-I", "-S", "-B", "-c", textwrap.dedent("""
        import os, time
        try:
            for _ in range(300):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
        except OSError:
            print("full", flush=True)
        time.sleep(60)
    """)))
    hogging = hog.launch("hog", rpc_dirs(), SandboxLimits(pids=48))
    try:
        deadline = time.monotonic() + 30
        while "full" not in hogging.sandbox.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "full" in hogging.sandbox.output()
        code, output, _ = run_process_probe(_probe("""
            pid = os.fork()
            if pid == 0:
                os._exit(3)
            out["child"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        """), SandboxLimits(pids=48))
    finally:
        hogging.sandbox.cleanup()
        hogging.listener.close()
    assert code == 0, output
    assert _result(output)["child"] == 3


def test_a_setsid_daemon_dies_with_the_sandbox(process_python, rpc_dirs):
    token = f"revise-daemon-{os.getpid()}-{time.monotonic_ns()}"
    code = textwrap.dedent(f"""
        # {token}
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.2)
            os._exit(0)
        print("daemonized", flush=True)
        time.sleep(120)
    """)
    runner = ProcessRunner(command=(process_python, "-I", "-S", "-B", "-c", code))
    launched = runner.launch("daemon", rpc_dirs(), SandboxLimits())
    try:
        deadline = time.monotonic() + 30
        while len(marked_processes(token)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        inside = marked_processes(token)
        assert len(inside) >= 2, launched.sandbox.output()
        outer = launched.sandbox.pid  # type: ignore[attr-defined]
        uids = {_uid_of(pid) for pid in (*inside, outer)}
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()
    assert marked_processes(token) == []
    assert 0 not in uids  # not root outside either
    if os.geteuid() == 0:
        assert uids == {65534}


def test_the_host_survives_killing_the_parent(run_process_probe):
    code, output, _ = run_process_probe(_probe(f"""
        import signal
        out["ppid"] = os.getppid()
        for name, pid in (("parent", os.getppid()), ("host", {os.getpid()})):
            try:
                os.kill(pid, signal.SIGKILL)
                out[name] = "sent"
            except OSError as exc:
                out[name] = exc.errno
        out["uid"] = [os.getuid(), os.geteuid(), os.getgid(), os.getgroups()]
    """))
    result = _result(output)
    assert code == 0, output
    assert result["ppid"] == 1  # bwrap's init, which a signal from inside cannot kill
    assert result["host"] == 3  # ESRCH: the host's pids do not exist in the sandbox
    assert result["uid"][:3] == [10001, 10001, 10001] and 0 not in result["uid"][3]


def test_the_environment_is_clean(run_process_probe, monkeypatch):
    monkeypatch.setenv("REVISE_PROVIDER_API_KEY", "sk-host-secret-1234")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "sk-host-secret-1234")
    code, output, _ = run_process_probe(_probe("""
        out["env"] = dict(os.environ)
        out["pid1"] = open("/proc/1/environ", "rb").read().decode("latin-1")
        out["opt"] = sorted(os.listdir("/opt/revise"))
        out["mode"] = oct(os.stat("/opt/revise/runtime.py").st_mode & 0o777)
    """))
    result = _result(output)
    assert code == 0, output
    assert "sk-host-secret" not in output
    assert set(result["env"]) <= {"PATH", "LANG", "HOME", "TMPDIR", "PWD",
                                  "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}, result["env"]
    assert result["opt"] == ["__pycache__", "language.py", "runtime.py",
                             "runtime.pyc"]  # same magic here: bytecode beside the sources
    assert result["mode"] == "0o444"


def test_memory_tmpfs_and_output_limits(run_process_probe):
    code, output, _ = run_process_probe(
        "blob = b'x' * (400 * 1024 * 1024)\nprint('survived')", SandboxLimits(memory_mb=64))
    assert "survived" not in output and code != 0
    code, output, _ = run_process_probe(_probe("""
        try:
            with open("/tmp/big", "wb") as fh:
                for _ in range(16):
                    fh.write(b"x" * (1 << 20))
            out["fill"] = "fit"
        except OSError as exc:
            out["fill"] = exc.errno
    """), SandboxLimits(tmpfs_mb=4))
    assert code == 0, output
    assert _result(output)["fill"] in (27, 28)  # EFBIG or ENOSPC
    code, output, _ = run_process_probe(
        "for i in range(50000): print('line', i)\nprint('the end')")
    assert code == 0
    assert len(output.encode()) <= 8192 and output.rstrip().endswith("the end")


def test_wait_kill_cleanup(process_python, rpc_dirs):
    runner = ProcessRunner(command=(process_python, "-c", "import time; time.sleep(120)"))
    launched = runner.launch("kill-test", rpc_dirs(), SandboxLimits())
    try:
        assert launched.sandbox.wait(0.5) is None
        assert launched.sandbox.wait(0) is None
        launched.sandbox.kill()
        assert launched.sandbox.wait(10) is not None
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()
    launched.sandbox.cleanup()  # idempotent


def test_a_missing_bwrap_fails_closed(process_python, rpc_dirs, tmp_path):
    marker = tmp_path / "ran"
    runner = ProcessRunner(settings=ProcessSettings(bwrap=tmp_path / "no-bwrap"),
                           command=(process_python, "-c", f"open({str(marker)!r}, 'w')"))
    with pytest.raises(SandboxUnavailable, match=r"REVISE_PROCESS_BWRAP=.*not an executable"):
        runner.launch("missing", rpc_dirs(), SandboxLimits())
    assert not marker.exists()
    no_python = ProcessRunner(settings=ProcessSettings(python=tmp_path / "python3"))
    with pytest.raises(SandboxUnavailable, match="no Python for the process sandbox"):
        no_python.check()


def test_a_bwrap_that_does_not_isolate_is_refused(process_python, rpc_dirs, tmp_path):
    """An impostor that runs the command unsandboxed must not pass the preflight."""
    shelf = Path(tempfile.mkdtemp(prefix="revise-fake-bwrap-"))
    try:
        shelf.chmod(0o755)
        fake = shelf / "bwrap"
        fake.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\n'
                        'exec "$@"\n')
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        runner = ProcessRunner(settings=ProcessSettings(bwrap=fake),
                               command=(process_python, "-c", "print('unsandboxed')"))
        with pytest.raises(SandboxUnavailable, match="cannot be set up"):
            runner.launch("impostor", rpc_dirs(), SandboxLimits())
    finally:
        for path in shelf.iterdir():
            path.unlink()
        shelf.rmdir()


def test_a_root_host_runs_bwrap_as_the_sandbox_uid(process_python, rpc_dirs):
    if os.geteuid() != 0:
        pytest.skip("only a root host switches uid")
    runner = ProcessRunner(command=(process_python, "-c", "import time; time.sleep(30)"))
    launched = runner.launch("uid", rpc_dirs(), SandboxLimits())
    try:
        outer = launched.sandbox.pid  # type: ignore[attr-defined]
        status = Path(f"/proc/{outer}/status").read_text()
        groups = next(line for line in status.splitlines() if line.startswith("Groups:"))
        assert _uid_of(outer) == 65534 and groups.split() == ["Groups:"]
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()


def test_the_sandbox_dies_with_a_killed_host(process_python, tmp_path):
    """--die-with-parent: a host killed without any cleanup leaves no sandbox behind."""
    import signal
    import subprocess
    import sys

    token = f"revise-orphan-{os.getpid()}-{time.monotonic_ns()}"
    host = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from broker.envelope import SandboxLimits
        from sandbox.runner import ProcessRunner
        marker = "{token}" + "-sandbox"  # only the sandbox's command line has it whole
        runner = ProcessRunner(command=({process_python!r}, "-c",
                                        "# " + marker + "\\nimport time; time.sleep(120)"))
        launched = runner.launch("orphan", Path({str(tmp_path)!r}) / "rpc", SandboxLimits())
        print("started", flush=True)
        time.sleep(120)
    """)
    repo = Path(__file__).resolve().parents[2]
    scratch = tmp_path / "host-tmp"  # the killed host cannot remove its temp dirs: keep
    scratch.mkdir(mode=0o700)  # them here (private: its mount points fall back to /tmp)
    mount_dirs = set(Path(tempfile.gettempdir()).glob("revise-bwrap-*"))
    proc = subprocess.Popen([sys.executable, "-c", host], cwd=repo, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(repo),
                                            "TMPDIR": str(scratch)})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        assert marked_processes(f"{token}-sandbox")
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while marked_processes(f"{token}-sandbox") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marked_processes(f"{token}-sandbox") == []
    for left in set(Path(tempfile.gettempdir()).glob("revise-bwrap-*")) - mount_dirs:
        for mount_point in left.iterdir():
            mount_point.rmdir()  # empty: the binds lived in the dead host's namespace
        left.rmdir()


def test_the_runtime_runs_from_bytecode_compiled_on_the_host(process_python, tmp_path):
    """The sandbox's Python uses the host's bytecode magic here, so the runtime starts
    from ``runtime.pyc`` (no compile at each start) and a real run goes through it."""
    import importlib.util
    import marshal

    from broker.envelope import Envelope
    from broker.settings import SandboxKind, Settings
    from orchestrator.embedded import open_services
    from sandbox.job import compiled_file

    source = (Path(__file__).parents[2] / "sandbox" / "runtime.py").read_bytes()
    pyc = compiled_file(source, "runtime.py")
    assert pyc[:4] == importlib.util.MAGIC_NUMBER and pyc[4:8] == (1).to_bytes(4, "little")
    assert pyc[8:16] == importlib.util.source_hash(source)
    assert marshal.loads(pyc[16:]).co_filename == "/opt/revise/runtime.py"
    runner = ProcessRunner()
    assert runner.profile(SandboxLimits()).sandbox_command()[-2] == "/opt/revise/runtime.pyc"
    services = open_services(Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS),
                             runner=runner)
    try:
        report = services.pipeline().run("compiled", (
            "async def orchestrate(ctx, args):\n"
            '    done = await ctx.run("text.generate", {"prompt": "é"})\n'
            '    return {"got": done is not None, "pi": 3.25}\n'), {}, Envelope()).to_json()
    finally:
        runner.close()
        services.close()
    assert report["status"] == "succeeded", report
    assert report["result"] == {"got": True, "pi": 3.25}


def test_a_sandbox_python_of_other_bytecode_runs_the_runtime_source(process_python,
                                                                    monkeypatch):
    seen = {}

    def preflight(self, tool, profile):
        seen["probed"] = True
        return {"version": [3, 12], "magic": "cb0d0d0a"}  # another interpreter's magic

    monkeypatch.setattr(ProcessRunner, "_preflight", preflight)
    command = ProcessRunner().profile(SandboxLimits()).sandbox_command()
    assert seen and command[-2] == "/opt/revise/runtime.py"

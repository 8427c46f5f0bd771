"""The Docker sandbox against a real engine and the real image.

Each test runs a small probe (``python3 -c``) in a container made from the
production profile and checks one isolation property from the inside.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.envelope import SandboxLimits
from broker.errors import SandboxUnavailable
from sandbox.docker_runner import DockerRunner, remove_stale_containers
from sandbox.image import pin_path, read_pin, verify_image
from sandbox.job import runtime_command
from sandbox.profile import LABEL_OWNER, LABEL_SANDBOX
from tests.acceptance.probes import RPC_DIR_READ_ONLY

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]

# Syscall numbers of the native ABIs (the profile lists x86_64 and aarch64).
_SYSCALLS = {
    "x86_64": {"unshare": 272, "setns": 308, "mount": 165, "keyctl": 250, "ptrace": 101,
               "bpf": 321, "clone3": 435, "io_uring_setup": 425, "perf_event_open": 298},
    "aarch64": {"unshare": 97, "setns": 268, "mount": 40, "keyctl": 219, "ptrace": 117,
                "bpf": 280, "clone3": 435, "io_uring_setup": 425, "perf_event_open": 241},
}


def _probe(body: str) -> str:
    """Probe source that prints one JSON object (the dict ``out``) on its last line."""
    return "import json, os, sys\nout = {}\n" + textwrap.dedent(body) + "\nprint(json.dumps(out))"


def _result(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def _status(field: str) -> str:
    return (f"[line.split(':', 1)[1].strip() for line in open('/proc/self/status') "
            f"if line.startswith('{field}:')][0]")


def test_network_is_isolated(run_probe):
    code, output, _ = run_probe(_probe("""
        import socket
        out["interfaces"] = sorted(line.split(":")[0].strip()
                                   for line in open("/proc/net/dev").readlines()[2:])
        for name, addr in (("ip", ("1.1.1.1", 53)), ("host", ("172.17.0.1", 2375))):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(3)
            try:
                s.connect(addr)
                out[name] = "connected"
            except OSError as exc:
                out[name] = exc.errno
        try:
            socket.getaddrinfo("pypi.org", 443)
            out["dns"] = "resolved"
        except OSError:
            out["dns"] = "failed"
    """))
    result = _result(output)
    assert code == 0, output
    assert result["interfaces"] == ["lo"]
    assert result["ip"] != "connected" and result["host"] != "connected"
    assert result["dns"] == "failed"


def test_root_filesystem_is_read_only(run_probe):
    code, output, _ = run_probe(_probe("""
        for path in ("/usr/evil", "/etc/passwd", "/opt/revise/runtime.py", "/rpc/x"):
            try:
                open(path, "a").close()
                out[path] = "written"
            except OSError as exc:
                out[path] = exc.errno
    """))
    result = _result(output)
    assert code == 0, output
    assert set(result.values()) <= {30, 13}, result  # EROFS or EACCES, never written


def test_runs_as_unprivileged_user(run_probe):
    code, output, _ = run_probe(_probe("""
        out["ids"] = [os.getuid(), os.geteuid(), os.getgid(), os.getegid()]
        out["groups"] = os.getgroups()
    """))
    assert code == 0, output
    assert _result(output) == {"ids": [10001] * 4, "groups": [10001]}  # no root group


def test_capabilities_dropped_and_no_new_privileges(run_probe):
    fields = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
    body = "\n".join(f"out[{f!r}] = {_status(f)}" for f in fields)
    code, output, _ = run_probe(_probe(body))
    result = _result(output)
    assert code == 0, output
    for cap in fields[:5]:
        assert int(result[cap], 16) == 0, (cap, result)
    assert result["NoNewPrivs"] == "1"
    assert result["Seccomp"] == "2"  # a filter is installed


def test_seccomp_denies_escape_syscalls(run_probe):
    machine = os.uname().machine
    if machine not in _SYSCALLS:
        pytest.skip(f"no syscall table for {machine}")
    code, output, _ = run_probe(_probe(f"""
        import ctypes, socket
        libc = ctypes.CDLL(None, use_errno=True)
        numbers = {_SYSCALLS[machine]!r}
        args = {{"unshare": [0x10000000], "setns": [0, 0x10000000]}}
        for name, nr in numbers.items():
            ctypes.set_errno(0)
            rc = libc.syscall(nr, *[ctypes.c_long(a) for a in args.get(name, [0] * 5)])
            out[name] = [rc, ctypes.get_errno()]
        for family in (40, 16, 38):  # AF_VSOCK, AF_NETLINK, AF_ALG
            try:
                socket.socket(family, socket.SOCK_DGRAM).close()
                out[f"af{{family}}"] = "opened"
            except OSError as exc:
                out[f"af{{family}}"] = exc.errno
        # ordinary process machinery still works under the filter
        pid = os.fork()
        if pid == 0:
            os._exit(7)
        out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    """))
    result = _result(output)
    assert code == 0, output
    for name in ("unshare", "setns", "mount", "keyctl", "ptrace", "bpf", "io_uring_setup",
                 "perf_event_open"):
        assert result[name] == [-1, 1], (name, result[name])  # EPERM
    assert result["clone3"] == [-1, 38]  # ENOSYS: libc falls back to the filtered clone
    assert result["af40"] == result["af16"] == result["af38"] == 97  # EAFNOSUPPORT
    assert result["fork"] == 7


def test_tmpfs_is_small_noexec_and_the_only_scratch(run_probe):
    limits = SandboxLimits(tmpfs_mb=4)
    code, output, _ = run_probe(_probe("""
        out["cwd"] = os.getcwd()
        with open("/tmp/run.sh", "w") as fh:
            fh.write("#!/bin/sh\\necho hi\\n")
        os.chmod("/tmp/run.sh", 0o755)
        try:
            os.execv("/tmp/run.sh", ["/tmp/run.sh"])
        except OSError as exc:
            out["exec"] = exc.errno
        try:
            with open("/tmp/big", "wb") as fh:
                for _ in range(16):
                    fh.write(b"x" * (1 << 20))
            out["fill"] = "fit"
        except OSError as exc:
            out["fill"] = exc.errno
    """), limits)
    result = _result(output)
    assert code == 0, output
    assert result["cwd"] == "/tmp"
    assert result["exec"] == 13  # EACCES: noexec
    assert result["fill"] in (27, 28)  # EFBIG (fsize) or ENOSPC (tmpfs size)


def test_rpc_dir_is_read_only_and_its_socket_connectable(docker_client, sandbox_settings,
                                                         rpc_dirs):
    code = _probe(textwrap.dedent("""
        import socket, struct
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("/rpc/rpc.sock")
        body = json.dumps({"t": "hello", "uid": os.getuid()}).encode()
        s.sendall(struct.pack(">I", len(body)) + body)
        out["reply"] = s.recv(100).decode()
    """) + RPC_DIR_READ_ONLY)
    runner = DockerRunner(sandbox_settings, client=docker_client,
                          command=("python3", "-I", "-S", "-B", "-c", code))
    launched = runner.launch("rpc-test", rpc_dirs(), SandboxLimits())
    try:
        launched.listener.settimeout(60)
        conn, _ = launched.listener.accept()
        with conn:
            size = int.from_bytes(conn.recv(4), "big")
            hello = json.loads(conn.recv(size))
            conn.sendall(b"hello from the host")
        assert launched.sandbox.wait(60) == 0, launched.sandbox.output()
        result = _result(launched.sandbox.output())
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()
    assert hello == {"t": "hello", "uid": 10001}
    assert result == {"reply": "hello from the host", "listing": ["rpc.sock"], "write": 30}
    assert sorted(p.name for p in launched.job.rpc_dir.iterdir()) == ["rpc.sock"]


def test_no_host_environment_or_credentials(run_probe, monkeypatch):
    monkeypatch.setenv("REVISE_PROVIDER_API_KEY", "sk-host-secret-1234")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-1234")
    code, output, _ = run_probe(_probe("""
        out["env"] = dict(os.environ)
        out["mounts"] = [line.split()[1] for line in open("/proc/self/mounts")]
        out["docker_sock"] = os.path.exists("/var/run/docker.sock")
        out["opt"] = sorted(os.listdir("/opt/revise"))
        out["job"] = os.path.exists("/job")
    """))
    result = _result(output)
    assert code == 0, output
    assert "sk-host-secret" not in output
    assert set(result["env"]) <= {"PATH", "HOSTNAME", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE",
                                  "PYTHONHASHSEED"}, result["env"]
    assert result["env"]["PYTHONHASHSEED"] == "0"
    assert not result["docker_sock"]
    assert result["opt"] == ["__pycache__", "language.py", "runtime.py"]
    assert result["job"] is False
    assert not any(m.startswith(("/root", "/home", "/work")) for m in result["mounts"])


def test_memory_limit_kills_the_container(run_probe):
    limits = SandboxLimits(memory_mb=64)
    code, output, sandbox = run_probe("blob = b'x' * (400 * 1024 * 1024)\nprint('survived')",
                                      limits)
    assert "survived" not in output
    assert code == 137
    assert sandbox.oom_killed


def test_pids_limit_caps_threads(run_probe):
    limits = SandboxLimits(pids=16)
    code, output, _ = run_probe(_probe("""
        import threading, time
        started = 0
        try:
            for _ in range(200):
                threading.Thread(target=time.sleep, args=(3,), daemon=True).start()
                started += 1
        except RuntimeError:
            pass
        out["started"] = started
    """), limits)
    assert code == 0, output
    assert _result(output)["started"] < 16


def test_timeout_then_kill_then_removed(docker_client, sandbox_settings, rpc_dirs):
    from docker.errors import NotFound

    runner = DockerRunner(sandbox_settings, client=docker_client,
                          command=("python3", "-c", "import time; time.sleep(120)"))
    launched = runner.launch("kill-test", rpc_dirs(), SandboxLimits())
    sandbox = launched.sandbox
    launched.listener.close()
    try:
        begun = time.monotonic()
        assert sandbox.wait(1.0) is None
        assert sandbox.wait(0) is None
        assert time.monotonic() - begun < 10
        sandbox.kill()
        assert sandbox.wait(15) == 137
    finally:
        sandbox.cleanup()
    sandbox.cleanup()  # idempotent
    with pytest.raises(NotFound):
        docker_client.containers.get(sandbox.container_id)


def test_output_is_a_bounded_tail(run_probe):
    code, output, sandbox = run_probe(
        "import sys\nfor i in range(50000): print('line', i)\nprint('the end')")
    assert code == 0
    assert len(output.encode()) <= sandbox._profile.log_tail_bytes
    assert output.rstrip().endswith("the end")


def test_container_settings_as_the_engine_sees_them(docker_client, sandbox_settings, rpc_dirs):
    limits = SandboxLimits(memory_mb=96, cpus=0.5, pids=32, tmpfs_mb=8)
    runner = DockerRunner(sandbox_settings, client=docker_client)
    launched = runner.launch("settings-test", rpc_dirs(), limits)
    try:
        attrs = docker_client.api.inspect_container(launched.sandbox.container_id)
    finally:
        launched.sandbox.cleanup()
        launched.listener.close()
    host = attrs["HostConfig"]
    assert attrs["Image"] == read_pin(sandbox_settings)["image_id"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"] and not host["CapAdd"]
    assert host["Privileged"] is False
    assert host["Memory"] == host["MemorySwap"] == 96 * 1024 * 1024
    assert host["NanoCpus"] == 500_000_000
    assert host["PidsLimit"] == 32
    assert host["Tmpfs"]["/tmp"].endswith("size=8m")
    assert "no-new-privileges:true" in host["SecurityOpt"]
    assert attrs["Config"]["User"] == "10001:10001"
    assert attrs["Config"]["Cmd"] == runtime_command()
    [mount] = attrs["Mounts"]
    assert (mount["Destination"], mount["RW"]) == ("/rpc", False)
    assert mount["Source"] == str(launched.job.rpc_dir.resolve())


def test_start_refuses_an_unpinned_or_swapped_image(docker_client, sandbox_settings,
                                                     rpc_dirs, tmp_path):
    from broker.settings import Settings

    assert verify_image(docker_client, sandbox_settings) == read_pin(sandbox_settings)["image_id"]
    unpinned = Settings(home=tmp_path / "empty-home",
                        sandbox_pin=tmp_path / "empty-home" / "pin.json")
    with pytest.raises(SandboxUnavailable, match="revise sandbox build"):
        DockerRunner(unpinned, client=docker_client).launch("r", rpc_dirs(), SandboxLimits())

    swapped = Settings(home=tmp_path / "swapped-home",
                       sandbox_pin=tmp_path / "swapped-home" / "pin.json")
    pin_path(swapped).parent.mkdir(parents=True)
    record = dict(read_pin(sandbox_settings), image_id="sha256:" + "0" * 64)
    pin_path(swapped).write_text(json.dumps(record))
    with pytest.raises(SandboxUnavailable, match="is pinned"):
        DockerRunner(swapped, client=docker_client).launch("r", rpc_dirs(), SandboxLimits())


def test_stale_containers_of_dead_owners_are_swept(docker_client, sandbox_settings):
    """Only an owner of this process table is judged: a dead one's container goes; one of
    another host (or the old hostname:pid label, which a shared hostname makes ambiguous)
    stays, even when that pid is dead here."""
    dead = subprocess.run([sys.executable, "-c", "from broker.owner import process_owner; "
                           "print(process_owner())"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    image = read_pin(sandbox_settings)["image_id"]
    _, host, _domain, boot, pid, start = dead.split(":")
    labels = {"dead": dead, "other_host": f"v2:{host}:0123456789abcdef:{boot}:{pid}:{start}",
              "old_form": f"{socket.gethostname()}:{pid}"}
    containers = {name: docker_client.containers.create(
        image, command=["true"], network_mode="none",
        labels={LABEL_SANDBOX: "1", LABEL_OWNER: owner}) for name, owner in labels.items()}
    try:
        removed = remove_stale_containers(docker_client)
        # Any worker starting meanwhile sweeps too (another test's stack, a second host on
        # this engine): the dead owner's container is gone, by this sweep or by that one.
        left = {c.id for c in docker_client.containers.list(
            all=True, filters={"label": LABEL_SANDBOX})}
        assert containers["dead"].id not in left
        assert containers["other_host"].id in left and containers["other_host"].id not in removed
        assert containers["old_form"].id in left and containers["old_form"].id not in removed
    finally:
        for name in ("other_host", "old_form"):
            containers[name].remove(force=True)


def test_a_container_removed_while_the_sweep_lists_does_not_stop_it(docker_client,
                                                                    sandbox_settings,
                                                                    monkeypatch):
    """Workers sweep concurrently: a container another sweep removes between the listing and
    its inspection is gone, not an error that stops the sweep of the rest."""
    dead = subprocess.run([sys.executable, "-c", "from broker.owner import process_owner; "
                           "print(process_owner())"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    image = read_pin(sandbox_settings)["image_id"]
    gone, stale = (docker_client.containers.create(
        image, command=["true"], network_mode="none",
        labels={LABEL_SANDBOX: "1", LABEL_OWNER: dead}) for _ in range(2))
    listing = docker_client.api.containers

    def listed_then_removed(*args, **kwargs):
        found = listing(*args, **kwargs)
        gone.remove(force=True)
        return found

    monkeypatch.setattr(docker_client.api, "containers", listed_then_removed)
    removed = remove_stale_containers(docker_client)
    assert stale.id in removed
    assert gone.id not in removed


def test_sigterm_of_the_host_process_removes_its_container(docker_client, sandbox_settings,
                                                           tmp_path):
    from docker.errors import NotFound

    host = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from broker.envelope import SandboxLimits
        from broker.settings import Settings
        from sandbox.docker_runner import DockerRunner
        base = Path({str(tmp_path)!r})
        runner = DockerRunner(Settings(home=Path({str(sandbox_settings.home)!r})),
                              command=("python3", "-c", "import time; time.sleep(120)"))
        launched = runner.launch("sigterm-test", base / "rpc", SandboxLimits())
        print(launched.sandbox.container_id, flush=True)
        time.sleep(120)
    """)
    proc = subprocess.Popen([sys.executable, "-c", host], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        container_id = proc.stdout.readline().strip()
        assert container_id, "the host process did not start a container"
        assert docker_client.containers.get(container_id).status == "running"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == -signal.SIGTERM
    finally:
        if proc.poll() is None:
            proc.kill()
    with pytest.raises(NotFound):
        docker_client.containers.get(container_id)

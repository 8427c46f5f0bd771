"""Sandbox runners: where the script runs, and the contract every runner keeps.

For each revision the host makes a fresh RPC directory and listens on the one
socket in it (``sandbox.job.open_rpc_dir``); a runner starts a sandbox that
sees that directory read-only at ``/rpc`` and the runtime files read-only in
``/opt/revise``, running ``sandbox.job.runtime_command()``. ``launch`` hands
back the job, the listener and the started sandbox; a runner with a warm pool
may hand back a pre-started sandbox (its own directory and listener) instead.
The host accepts one connection, serves, then calls ``sandbox.cleanup()``,
closes the listener and removes the directory.

Docker (``sandbox.docker_runner``) is the hardened runner. ``ProcessRunner``
here is the bubblewrap sandbox (policy in ``sandbox.process_profile``), weaker
than Docker and saying so in ``warnings``. ``WeakProcessRunner`` is the old
rlimits-only child, used only when an operator names it.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from broker.envelope import SandboxLimits
from broker.errors import SandboxUnavailable
from sandbox.bwrap import (
    BwrapTool,
    bwrap_tool,
    drops_privileges,
    find_python,
    private_dir,
    python_binds,
    rpc_mount_point,
    tool_mount_point,
)
from sandbox.child import ChildSandbox, init_pidfd, wait_until_armed
from sandbox.job import (
    SANDBOX_DIR,
    SandboxJob,
    runtime_contents,
)
from sandbox.launch import Launched, launch_cold
from sandbox.process_profile import BwrapFds, ProcessProfile, ProcessSettings, host_root_layout
from sandbox.seccomp_bpf import compile_bpf
from sandbox.spawner import Spawner, placeholder
from sandbox.warm_pool import WarmLaunches

_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_FD_OPTIONS = ("--ro-bind-data", "--seccomp", "--info-fd")  # bwrap's arguments that are fds
_SPAWNER = Spawner()  # this process's bwrap launcher
# Loaded here, not between fork and exec, where dlopen could meet a lock held at fork.
_LIBC = ctypes.CDLL(None, use_errno=True)
_SETUP_TIMEOUT = 30.0
# Printed by the preflight probe inside a fresh sandbox: what check() verifies.
_PREFLIGHT = ("import importlib.util, json, os, sys\n"
              "status = dict(l.split(':', 1) for l in open('/proc/self/status') if ':' in l)\n"
              "print(json.dumps({'version': list(sys.version_info[:2]), 'uid': os.getuid(),"
              " 'seccomp': status['Seccomp'].strip(), 'nnp': status['NoNewPrivs'].strip(),"
              " 'magic': importlib.util.MAGIC_NUMBER.hex()}))\n")


class Runner(Protocol):
    kind: str  # "docker" | "process"
    isolation: str  # one sentence: what isolates the script
    warnings: tuple[str, ...]  # non-empty for weaker-than-Docker isolation; in the run JSON

    def launch(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched: ...
    def close(self) -> None: ...  # stops warm pools


@contextlib.contextmanager
def _memfd(name: str, data: bytes) -> Iterator[int]:
    """An in-memory file holding ``data`` at offset 0, for bwrap to copy from."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


class ProcessRunner(WarmLaunches):
    """Each job in a fresh bubblewrap sandbox (see ``sandbox.process_profile``)."""

    kind = "process"
    isolation = ("process sandbox (bubblewrap): unprivileged uid, own user/pid/net/mount/ipc/"
                 "uts namespaces, read-only root, seccomp filter, no new privileges, rlimits "
                 "including a pids limit")
    warnings: tuple[str, ...] = (
        "the process sandbox (bubblewrap) is weaker than the Docker sandbox: memory is capped "
        "per process (RLIMIT_AS), not per sandbox; there is no CPU quota, only a CPU-time "
        "limit; the host's /usr is visible read-only",)

    def __init__(self, *, settings: ProcessSettings | None = None,
                 command: Sequence[str] | None = None, warm: int = 0,
                 warm_limits: SandboxLimits | None = None) -> None:
        """``command`` replaces the runtime command (tests run probes with it); ``warm``
        pre-starts that many sandboxes for jobs with ``warm_limits`` (default limits)."""
        self.settings = settings or ProcessSettings()
        self._command = tuple(command) if command is not None else None
        self._lock = threading.Lock()
        self._ready: tuple[BwrapTool, ProcessProfile] | None = None
        self._keep_warm(warm, warm_limits)

    def check(self) -> None:
        """Prove, once, that the sandbox can be set up here; else SandboxUnavailable."""
        self._prepared()

    def profile(self, limits: SandboxLimits) -> ProcessProfile:
        return self._prepared()[1].model_copy(update={"limits": limits})

    def _launch_cold(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        self._prepared()
        return launch_cold(self._start, run_id, rpc_dir, limits)

    def _prepared(self) -> tuple[BwrapTool, ProcessProfile]:
        with self._lock:
            if self._ready is None:
                tool, profile = self._base()
                seen = self._preflight(tool, profile)
                compiled = seen.get("magic") == importlib.util.MAGIC_NUMBER.hex()
                self._ready = (tool, profile.model_copy(update={
                    "command": self._command, "compiled_runtime": compiled}))
            return self._ready

    def _base(self) -> tuple[BwrapTool, ProcessProfile]:
        tool = bwrap_tool(self.settings.bwrap)
        python = find_python(self.settings.python)
        links, dirs = host_root_layout()
        binds = python_binds(python, ("/usr", *dirs))
        prlimit = next((p for p in ("/usr/bin/prlimit", "/bin/prlimit")
                        if Path(p).is_file()), None)
        ceiling = self.settings.nproc_ceiling if drops_privileges() else None
        return tool, ProcessProfile(
            python=python, host_uid=self.settings.uid, host_gid=self.settings.gid, ro_binds=binds,
            root_links=links, nproc_ceiling=ceiling, prlimit=prlimit)

    def _preflight(self, tool: BwrapTool, profile: ProcessProfile) -> dict[str, Any]:
        """What a fresh sandbox says of itself (``_PREFLIGHT``); SandboxUnavailable when
        it cannot be set up or is not isolated."""
        probe = profile.model_copy(update={
            "command": (profile.python, "-I", "-S", "-B", "-c", _PREFLIGHT)})
        # Under the short private_dir: a socket path must stay within 107 bytes.
        with tempfile.TemporaryDirectory(prefix="pf-", dir=private_dir()) as tmp:
            rpc_dir = Path(tmp) / "rpc"
            launched = launch_cold(partial(self._spawn, tool, probe), "preflight", rpc_dir,
                                   SandboxLimits())
            try:
                code = launched.sandbox.wait(_SETUP_TIMEOUT)
                output = launched.sandbox.output()
            finally:
                launched.sandbox.cleanup()
                launched.listener.close()
        seen, problem = _preflight_report(code, output)
        if problem:
            raise SandboxUnavailable(
                f"the process sandbox cannot be set up ({tool.origin} bwrap {tool.path}, "
                f"Python {profile.python}, uid {profile.uid}): {problem}; output: "
                f"{output.strip()[-600:]!r}. Fix the host, use Docker (REVISE_SANDBOX=docker), "
                "or accept the weak mode explicitly (REVISE_SANDBOX=process with "
                "REVISE_PROCESS_ISOLATION=weak)")
        return seen

    def _start(self, job: SandboxJob) -> ChildSandbox:
        tool, profile = self._prepared()
        return self._spawn(tool, profile.model_copy(update={"limits": job.limits}), job)

    def _spawn(self, tool: BwrapTool, profile: ProcessProfile, job: SandboxJob) -> ChildSandbox:
        workdir = tempfile.TemporaryDirectory(prefix="revise-proc-")
        log_path = Path(workdir.name) / "output.log"
        rpc_source, setup = _entry(tool, profile, job.rpc_dir)
        with contextlib.ExitStack() as stack:
            files = tuple((name, stack.enter_context(_memfd(Path(name).name, data)))
                          for name, data in runtime_contents(
                              compiled=profile.compiled_runtime))
            seccomp = stack.enter_context(_memfd("seccomp", compile_bpf(profile.seccomp)))
            info_r, info_w = os.pipe()
            stack.callback(os.close, info_r)
            fds = BwrapFds(files, seccomp, info_w)
            argv = _naming_inherited(profile.command_line(tool.path, rpc_source, fds), fds.all())
            try:
                with open(log_path, "wb") as log:
                    proc = _SPAWNER.spawn(argv, stdout=log.fileno(), inherited=fds.all(),
                                          **setup)
            except OSError as exc:
                workdir.cleanup()
                raise SandboxUnavailable(f"cannot start bwrap ({tool.path}): {exc}") from None
            finally:
                os.close(info_w)
            init = init_pidfd(info_r, proc.pid, _SETUP_TIMEOUT)
        sandbox = ChildSandbox(proc, workdir, log_path, tail_bytes=profile.log_tail_bytes,
                               init_pidfd=init[1] if init else None)
        armed = init is not None and wait_until_armed(init[0], proc, _SETUP_TIMEOUT)
        if not armed and sandbox.wait(0) is not None and "bwrap:" in sandbox.output():
            output = sandbox.output()
            sandbox.cleanup()
            raise SandboxUnavailable(f"bwrap could not set up the sandbox: {output.strip()}")
        return sandbox


def _entry(tool: BwrapTool, profile: ProcessProfile, rpc_dir: Path
           ) -> tuple[str, dict[str, Any]]:
    """Where bwrap finds the RPC directory, and the setup its process gets before bwrap
    runs (``sandbox.spawner``: ``enter_as_root`` or ``set_rlimits``)."""
    if drops_privileges():
        binds = [(rpc_dir, rpc_mount_point())]
        if tool.bind is not None:
            binds.append((Path(tool.bind), tool_mount_point()))
        return str(rpc_mount_point()), {
            "as_root": True, "binds": tuple((str(source), str(target)) for source, target in binds),
            "uid": profile.host_uid, "gid": profile.host_gid, "rlimits": profile.rlimits()}
    # An unprivileged host: bwrap runs as the host's own uid, which reaches the directory.
    return str(rpc_dir), {"as_root": False, "rlimits": profile.rlimits()}


def _naming_inherited(argv: list[str], inherited: tuple[int, ...]) -> list[str]:
    """``argv`` with each descriptor bwrap reads (its options before ``--``) named as the
    spawner places it."""
    end = argv.index("--")
    return [placeholder(inherited.index(int(arg)))
            if 0 < i < end and argv[i - 1] in _FD_OPTIONS else arg
            for i, arg in enumerate(argv)]


def _preflight_report(code: int | None, output: str) -> tuple[dict[str, Any], str]:
    """(what the probe printed, the problem with it or "")."""
    if code is None:
        return {}, "the probe did not finish in time"
    try:
        seen = json.loads(output.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}, f"the probe exited with {code} and printed no report"
    if tuple(seen["version"]) < (3, 11):
        return seen, f"the sandbox's Python is {seen['version']}, the runtime needs >= 3.11"
    if seen["uid"] == 0 or seen["seccomp"] != "2" or seen["nnp"] != "1":
        return seen, f"isolation incomplete: {seen}"
    return seen, ""


def _limit_child(limits: SandboxLimits) -> None:
    """The weak mode's child setup: rlimits, own session, no network where allowed."""
    os.setsid()
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the script dies with its host
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(limits.timeout_seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes * 4, limits.output_bytes * 4))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _LIBC.unshare(_CLONE_NEWNET)  # a private network namespace where the kernel allows it


class WeakProcessRunner:
    """The old rlimits-only child process: only when an operator names it explicitly."""

    kind = "process"
    isolation = ("weak process mode: a child Python with rlimits, a scrubbed environment and, "
                 "where the kernel allows, no network; no filesystem, uid or process isolation")
    warnings: tuple[str, ...] = (
        "UNSAFE: the weak process mode (REVISE_PROCESS_ISOLATION=weak) ran this script with "
        "rlimits only: it could read every file and signal every process of the host's user; "
        "never use it for untrusted scripts",)

    def __init__(self, *, command: Sequence[str] | None = None,
                 python: str = sys.executable) -> None:
        self._command = tuple(command) if command is not None else None
        self._python = python

    def launch(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        return launch_cold(self._start, run_id, rpc_dir, limits)

    def close(self) -> None:
        pass

    def _start(self, job: SandboxJob) -> ChildSandbox:
        workdir = tempfile.TemporaryDirectory(prefix="revise-proc-")
        log_path = Path(workdir.name) / "output.log"
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "TMPDIR": workdir.name, "HOME": workdir.name, "LANG": "C.UTF-8"}
        # No mount namespace: the runtime and the socket at their host paths.
        command = self._command or (self._python, "-I", "-S", "-B",
                                    str(SANDBOX_DIR / "runtime.py"), str(job.socket_path))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                command, cwd=workdir.name, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, close_fds=True,
                preexec_fn=partial(_limit_child, job.limits))
        return ChildSandbox(proc, workdir, log_path)


def kill_processes_mentioning(fragments: list[str]) -> None:
    """SIGKILL every process (but this one) whose command line contains a fragment.

    Weak-mode sandboxes run in their own session, so a host killed before it could
    clean up may leave them behind; their command line names their RPC directory.
    (bubblewrap sandboxes die with their host: ``--die-with-parent``.)
    """
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if any(fragment in cmdline for fragment in fragments):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass

"""Sandbox runners: where the script runs. Docker is the hardened one; the
process runner is the fallback (weaker isolation, and says so)."""

from __future__ import annotations

import ctypes
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from broker.envelope import SandboxLimits
from sandbox.job import SandboxJob, open_rpc_dir

RUNTIME_PATH = Path(__file__).with_name("runtime.py")
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1


class Sandbox(Protocol):
    def wait(self, timeout: float) -> int | None: ...
    def kill(self) -> None: ...
    def cleanup(self) -> None: ...
    def output(self) -> str: ...


@dataclass
class Launched:
    job: SandboxJob
    listener: socket.socket
    sandbox: Sandbox


class Runner(Protocol):
    kind: str
    isolation: str

    def start(self, job: SandboxJob) -> Sandbox: ...


def _limit_child(limits: SandboxLimits) -> None:
    """Runs in the child between fork and exec: rlimits, own session, no network."""
    os.setsid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # the script dies with its host
    memory = limits.memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    cpu = int(limits.timeout_seconds) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.output_bytes * 4, limits.output_bytes * 4))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    libc.unshare(_CLONE_NEWNET)  # a private network namespace where the kernel allows it


def kill_processes_mentioning(fragments: list[str]) -> None:
    """SIGKILL every process (but this one) whose command line contains a fragment.

    Process sandboxes run in their own session, so a host killed before it could
    clean up may leave them behind; their command line names their job directory.
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


class ProcessSandbox:
    def __init__(self, proc: subprocess.Popen[bytes], workdir: tempfile.TemporaryDirectory[str],
                 log_path: Path) -> None:
        self._proc = proc
        self._workdir = workdir
        self._log_path = log_path

    def wait(self, timeout: float) -> int | None:
        try:
            return self._proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()

    def cleanup(self) -> None:
        self.kill()
        self._workdir.cleanup()

    def output(self) -> str:
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self._log_path) - 8192))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


class ProcessRunner:
    """The script in a child Python with a scrubbed environment and rlimits."""

    kind = "process"
    isolation = ("process sandbox: rlimits, scrubbed environment, private temp dir and (where "
                 "the kernel allows) no network; weaker than the Docker sandbox")

    warnings: tuple[str, ...] = ("process sandbox: weaker isolation than the Docker sandbox",)

    def launch(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        listener = open_rpc_dir(rpc_dir)
        job = SandboxJob(run_id, rpc_dir, limits)
        return Launched(job, listener, self.start(job))

    def close(self) -> None:
        pass

    def start(self, job: SandboxJob) -> ProcessSandbox:
        workdir = tempfile.TemporaryDirectory(prefix="revise-proc-")
        log_path = Path(workdir.name) / "output.log"
        env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
               "TMPDIR": workdir.name, "HOME": workdir.name, "LANG": "C.UTF-8"}
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(RUNTIME_PATH), str(job.socket_path)],
                cwd=workdir.name, env=env, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, close_fds=True,
                preexec_fn=lambda: _limit_child(job.limits),
            )
        return ProcessSandbox(proc, workdir, log_path)

"""A sandbox that is a process the host started (bubblewrap, through the host's
``sandbox.spawner``, or the weak child, a child of the host itself).

Its stdout and stderr go to a log file in a private host directory (bounded by
the sandbox's RLIMIT_FSIZE); ``output`` reads the tail. ``kill`` ends the whole
sandbox: for bubblewrap that is the sandbox's pid namespace, killed through a
pidfd of its init process (the kernel then kills every process in it, daemons
included) and waited for, so nothing of the sandbox is left when ``kill``
returns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Protocol

from sandbox.channel import ready

_KILL_WAIT = 10.0


class SandboxProcess(Protocol):
    """What a sandbox needs of its outer process (``subprocess.Popen`` has it, and so does
    ``sandbox.spawner.Spawned``)."""

    pid: int

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def kill(self) -> None: ...


class ChildSandbox:
    def __init__(self, proc: SandboxProcess, workdir: tempfile.TemporaryDirectory[str],
                 log_path: Path, *, tail_bytes: int = 8192, init_pidfd: int | None = None
                 ) -> None:
        self._proc = proc
        self._workdir = workdir
        self._log_path = log_path
        self._tail_bytes = tail_bytes
        self._init_pidfd = init_pidfd
        self._lock = threading.Lock()
        self._tail: str | None = None  # kept once the log is removed

    @property
    def pid(self) -> int:
        return self._proc.pid

    def wait(self, timeout: float) -> int | None:
        try:
            return self._proc.wait(timeout=max(0.0, timeout))
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        with self._lock:
            self._kill_namespace()
            if self._proc.poll() is None:
                self._kill_process()
            self._proc.wait()

    def _kill_process(self) -> None:
        if not isinstance(self._proc, subprocess.Popen):  # bwrap: its namespace is killed
            self._proc.kill()
            return
        try:  # the weak child leads a process group of its own, its children in it
            os.killpg(self._proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _kill_namespace(self) -> None:
        fd = self._init_pidfd
        if fd is None:
            return
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone
        # Readable once the init has exited, which the kernel lets happen only after
        # every other process of its pid namespace is gone.
        deadline = time.monotonic() + _KILL_WAIT
        while time.monotonic() < deadline:
            if ready(fd, deadline - time.monotonic()):
                break

    def cleanup(self) -> None:
        """Kill everything and remove the log; safe to call any number of times."""
        self.kill()
        with self._lock:
            if self._tail is None:
                self._tail = self._read_tail()
            if self._init_pidfd is not None:
                os.close(self._init_pidfd)
                self._init_pidfd = None
            self._workdir.cleanup()

    def output(self) -> str:
        """At most ``tail_bytes`` of the end of stdout+stderr (also after cleanup)."""
        if self._tail is not None:
            return self._tail
        return self._read_tail()

    def _read_tail(self) -> str:
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self._log_path) - self._tail_bytes))
                return fh.read().decode("utf-8", "replace")
        except OSError:
            return ""


def init_pidfd(info_fd: int, outer_pid: int, timeout: float) -> tuple[int, int] | None:
    """(pid, pidfd) of the sandbox's init, from bwrap's ``--info-fd`` JSON; None when bwrap
    exited before writing it (setup failed) or the init is already gone."""
    import json

    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ready(info_fd, deadline - time.monotonic()):
            break
        chunk = os.read(info_fd, 4096)
        if not chunk:
            break
        data += chunk
    try:
        pid = int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return None
    if _status_field(pid, "PPid") != str(outer_pid):  # gone, and the pid reused meanwhile
        os.close(fd)
        return None
    return pid, fd


def wait_until_armed(pid: int, proc: SandboxProcess, timeout: float) -> bool:
    """Wait until the sandbox's init has finished its setup; False if it (or bwrap) ended.

    bwrap's init re-arms its parent-death signal (lost with the uid switch of the setup)
    right before it loads the seccomp filter: once ``Seccomp: 2`` shows, the sandbox dies
    with bwrap, and bwrap with the host. Until then a host that died would leave it.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        mode = _status_field(pid, "Seccomp")
        if mode is None:
            return False
        if mode == "2":
            return True
        time.sleep(0.0005)
    return False


def _status_field(pid: int, field: str) -> str | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(f"{field}:"):
            return line.split(":", 1)[1].strip()
    return None

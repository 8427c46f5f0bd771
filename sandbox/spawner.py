"""Process sandboxes are started by a small helper process, not by the worker itself.

Starting bwrap needs code between fork and exec (a root host binds the RPC
directory in a private mount namespace and drops to the sandbox uid; every host
sets the rlimits and the parent-death signal), so ``subprocess`` must fork, not
vfork. A launch that forked a sandbox worker (hundreds of MB, hundreds of threads)
cost it about 15 ms of CPU and the child 22 ms, most of it copying page tables and
the copy-on-write faults that follow: a third of a busy sandbox worker's CPU. So
each host process starts this module once, as a stdlib-only interpreter
(``python -I -S``), and asks it for every bwrap process over a Unix socket; a
launch then costs the host about 2.5 ms and the helper 7 (README, Performance):

- request: a JSON spec (argv, which setup, its parameters) with the descriptors the
  process gets: its stdout, an exit pipe's write end, then what it inherits;
- answer: ``{"pid": n}`` with a pidfd of the process, or ``{"error": ...}``.

The helper reaps each process and writes its exit status to its exit pipe, so the
host waits on that pipe (EOF without a status: the helper died, and its processes
with it). The helper dies with the host thread that started it (a thread kept for
that alone), and every process it starts dies with the helper: the parent-death
chain host, helper, bwrap, sandbox holds as it did with the host as bwrap's parent.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import threading
from functools import partial
from typing import Any

_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
_PR_SET_PDEATHSIG = 1
# Loaded here, not between fork and exec, where dlopen could meet a lock held at fork.
_LIBC = ctypes.CDLL(None, use_errno=True)
_MESSAGE_BYTES = 1 << 20
_MAX_FDS = 64


# ---- between fork and exec, in the helper's child ------------------------------------------


def set_rlimits(limits: list[list[int]], host: int) -> None:
    """The rlimits, and death with the helper from the first instruction of bwrap on
    (bwrap arms its own only after it has cloned the sandbox); after any uid switch,
    which would clear the signal."""
    for which, value in limits:
        resource.setrlimit(which, (value, value))
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != host:  # the helper died before the signal was armed
        os._exit(1)


def enter_as_root(binds: list[list[str]], uid: int, gid: int, limits: list[list[int]],
                  host: int) -> None:
    """A root host's child: in a mount namespace of its own (private: nothing propagates
    to the host) the RPC directory and bwrap's directory are bound on mount points the
    sandbox uid can reach, wherever the host keeps them; then the child becomes the
    unprivileged sandbox uid (so the sandbox is no root outside, and RLIMIT_NPROC binds
    it), and takes the rlimits."""
    if (_LIBC.unshare(_CLONE_NEWNS) != 0
            or _LIBC.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0
            or any(_LIBC.mount(os.fsencode(source), os.fsencode(target), None, _MS_BIND,
                               None) != 0 for source, target in binds)):
        err = ctypes.get_errno()
        raise OSError(err, f"cannot bind the sandbox's directories: {os.strerror(err)}")
    os.setgroups([])
    os.setgid(gid)
    os.setuid(uid)
    set_rlimits(limits, host)


# ---- the helper ----------------------------------------------------------------------------


class _Helper:
    def __init__(self, control: socket.socket) -> None:
        self._control = control
        self._lock = threading.Lock()
        self._exits: dict[int, tuple[subprocess.Popen[bytes], int]] = {}  # pid: (proc, pipe)
        self._children = threading.Condition(self._lock)
        self._reporting = 0  # children reaped whose status is not written yet

    def serve(self) -> None:
        threading.Thread(target=self._reap, daemon=True).start()
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self._control, _MESSAGE_BYTES, _MAX_FDS)
            except OSError:
                data, fds = b"", []
            if not data:  # the host closed its end: start nothing more
                for fd in fds:
                    os.close(fd)
                self._wait_for_children()
                return
            self._spawn(json.loads(data), fds)

    def _spawn(self, spec: dict[str, Any], fds: list[int]) -> None:
        stdout, exit_pipe, inherited = fds[0], fds[1], fds[2:]
        setup = (partial(enter_as_root, spec["binds"], spec["uid"], spec["gid"],
                         spec["rlimits"], os.getpid()) if spec["as_root"]
                 else partial(set_rlimits, spec["rlimits"], os.getpid()))
        argv = [str(inherited[int(a[1:])]) if a.startswith("\0") else a for a in spec["argv"]]
        try:
            with self._lock:  # the reaper must not see the child before it is recorded
                proc = subprocess.Popen(argv, env={}, cwd="/", stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=subprocess.STDOUT,
                                        close_fds=True, pass_fds=inherited,
                                        start_new_session=True, preexec_fn=setup)
                pidfd = os.pidfd_open(proc.pid)  # before the reaper may reap it
                self._exits[proc.pid] = (proc, exit_pipe)
                self._children.notify()
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(exit_pipe)
            self._control.send(json.dumps({"error": str(exc)}).encode())
            return
        finally:
            for fd in (stdout, *inherited):
                os.close(fd)
        try:
            socket.send_fds(self._control, [json.dumps({"pid": proc.pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)

    def _reap(self) -> None:
        while True:
            with self._children:
                while not self._exits:
                    self._children.wait()
            try:  # which child ended, without reaping it (its Popen reaps it)
                ended = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
            except ChildProcessError:
                continue
            if ended is None:
                continue
            with self._lock:  # a failed start is reaped by its Popen, under this lock
                entry = self._exits.pop(ended.si_pid, None)
                self._reporting += entry is not None
            if entry is None:
                continue
            proc, exit_pipe = entry
            code = proc.wait()
            try:
                os.write(exit_pipe, str(code).encode())
            except OSError:  # the host stopped waiting
                pass
            os.close(exit_pipe)
            with self._children:
                self._reporting -= 1
                self._children.notify_all()

    def _wait_for_children(self) -> None:
        with self._children:
            while self._exits or self._reporting:
                self._children.wait()


def _serve(control_fd: int, host: int) -> None:
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != host:
        return
    _Helper(socket.socket(fileno=control_fd)).serve()


# ---- the host's side -----------------------------------------------------------------------


class SpawnError(OSError):
    """The helper could not start the process (bwrap missing, the setup refused)."""


class Spawned:
    """A process the helper started, waited on through its exit pipe (the subset of
    ``subprocess.Popen`` a sandbox uses)."""

    def __init__(self, pid: int, pidfd: int, exit_pipe: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._pidfd: int | None = pidfd
        self._exit_pipe = exit_pipe
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        return self._collect(0.0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._collect(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        return code

    def kill(self) -> None:
        """SIGKILL the process, unless it has ended (the pidfd never names another)."""
        with self._lock:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def _collect(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
        poller = select.poll()
        poller.register(self._exit_pipe, select.POLLIN)
        if not poller.poll(None if timeout is None else max(0.0, timeout) * 1000):
            return None
        with self._lock:
            if self.returncode is None:
                status = os.read(self._exit_pipe, 64)
                # No status: the helper died, and the process with it.
                self.returncode = int(status) if status else -signal.SIGKILL
                os.close(self._exit_pipe)
                if self._pidfd is not None:
                    os.close(self._pidfd)
                    self._pidfd = None
            return self.returncode


class Spawner:
    """This process's helper, started on first use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._control: socket.socket | None = None
        self._pid = os.getpid()  # a forked child starts a helper of its own

    def spawn(self, argv: list[str], *, stdout: int, inherited: tuple[int, ...],
              as_root: bool, binds: tuple[tuple[str, str], ...] = (), uid: int = -1,
              gid: int = -1, rlimits: tuple[tuple[int, int], ...] = ()) -> Spawned:
        """Start ``argv`` with ``inherited`` open in it: an argument equal to
        ``placeholder(i)`` becomes the number ``inherited[i]`` has in the process."""
        spec = {"argv": argv, "as_root": as_root, "binds": [list(b) for b in binds],
                "uid": uid, "gid": gid, "rlimits": [list(r) for r in rlimits]}
        exit_read, exit_write = os.pipe()
        try:
            with self._lock:
                control = self._started()
                try:
                    socket.send_fds(control, [json.dumps(spec).encode()],
                                    [stdout, exit_write, *inherited])
                    data, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, 1)
                except OSError as exc:
                    self._stop_locked()
                    raise SpawnError(f"the sandbox launcher is gone ({exc})") from None
                if not data:
                    self._stop_locked()
                    raise SpawnError("the sandbox launcher is gone")
        finally:
            os.close(exit_write)
        answer = json.loads(data)
        if "error" in answer:
            os.close(exit_read)
            raise SpawnError(answer["error"])
        return Spawned(int(answer["pid"]), fds[0], exit_read)

    def close(self) -> None:
        """The helper starts nothing more and ends once its processes have."""
        with self._lock:
            self._stop_locked()

    def _stop_locked(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None

    def _started(self) -> socket.socket:
        if self._pid != os.getpid():  # forked: the socket and the helper are the parent's
            self._control, self._pid = None, os.getpid()
        if self._control is None:
            host_end, helper_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            started = threading.Event()
            # The helper dies with the thread that started it: one kept for that alone.
            threading.Thread(target=self._keep, args=(helper_end, started), daemon=True,
                             name="revise-sandbox-launcher").start()
            started.wait()
            helper_end.close()
            self._control = host_end
        return self._control

    @staticmethod
    def _keep(helper_end: socket.socket, started: threading.Event) -> None:
        try:
            # Its own session: a supervisor stopping the worker signals the worker's process
            # group (honcho, Ctrl-C), and the worker finishes its jobs (warm shutdown), so
            # their sandboxes must not die of that signal; the helper dies with its host.
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-B", __file__,
                                     str(helper_end.fileno()), str(os.getpid())],
                                    pass_fds=[helper_end.fileno()], close_fds=True,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            started.set()
        proc.wait()


def placeholder(index: int) -> str:
    """An argument that names ``inherited[index]`` of ``Spawner.spawn``."""
    return f"\0{index}"


if __name__ == "__main__":
    _serve(int(sys.argv[1]), int(sys.argv[2]))

"""The hardened Docker runner: one throwaway container per sandbox job.

The container sees the job's RPC directory read-only at ``/rpc`` (it holds
only the host's listening socket) and runs the image's runtime
(``sandbox.job.runtime_command``), which connects and receives its job over
the socket; nothing else of the host is mounted.

The policy lives in ``sandbox.profile``; this module only enforces it. Before
every start the pinned image id is verified (``verify_image``) and the
container is created from that id, not from the tag, so a retag between the
check and the start cannot swap the image.

Containers are always removed: ``cleanup()`` is idempotent and called by the
pipeline in a ``finally``; containers this process still owns are removed at
interpreter exit and on SIGTERM (when nobody else handles SIGTERM); and every
container is labelled with its run and owner so ``remove_stale_containers``
can sweep the ones a killed process left behind.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import secrets
import signal
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from broker.envelope import SandboxLimits
from broker.errors import SandboxError, SandboxUnavailable
from broker.owner import owner_alive, process_owner
from broker.settings import Settings
from sandbox.image import verify_image
from sandbox.job import SandboxJob
from sandbox.launch import Launched, launch_cold
from sandbox.profile import LABEL_OWNER, LABEL_RUN, LABEL_SANDBOX, SandboxProfile
from sandbox.warm_pool import WarmLaunches

log = logging.getLogger("revise.sandbox.docker")

_LOG_TAIL_LINES = 400


def _owner() -> str:
    """This process's owner token (``broker.owner``): unique even when hostnames are not."""
    return process_owner()


class _LiveContainers:
    """Containers this process created and has not removed yet.

    Process-wide on purpose: interpreter exit and SIGTERM are process-wide events,
    and whichever runner created a container, it must not outlive the process.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # the SIGTERM handler may re-enter on this thread
        self._live: dict[str, DockerSandbox] = {}
        self._installed = False

    def add(self, sandbox: DockerSandbox) -> None:
        with self._lock:
            self._live[sandbox.container_id] = sandbox
            if not self._installed:
                self._install()
                self._installed = True

    def discard(self, sandbox: DockerSandbox) -> None:
        with self._lock:
            self._live.pop(sandbox.container_id, None)

    def remove_all(self) -> None:
        with self._lock:
            live = list(self._live.values())
        for sandbox in live:
            sandbox.cleanup()

    def _install(self) -> None:
        atexit.register(self.remove_all)
        # SIGTERM's default action skips atexit. Take it over only when nobody else
        # handles it (a plain CLI process); a Celery worker has its own warm-shutdown
        # handler and relies on atexit and remove_stale_containers instead.
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return
        signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, _frame: Any) -> None:
        self.remove_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # die of SIGTERM as if we had never caught it


_LIVE = _LiveContainers()


def _expected_api_error(exc: Exception) -> bool:
    """Not found, or already stopping/being removed: the state we wanted anyway."""
    from docker.errors import APIError, NotFound

    return isinstance(exc, NotFound) or (
        isinstance(exc, APIError) and exc.status_code == 409)


class DockerSandbox:
    """One started container; the ``Sandbox`` protocol of ``sandbox.runner``."""

    def __init__(self, client: Any, container_id: str, profile: SandboxProfile) -> None:
        self._client = client
        self.container_id = container_id
        self._profile = profile
        self._lock = threading.RLock()  # the SIGTERM handler may re-enter on this thread
        self._exit_code: int | None = None
        self._oom_killed = False
        self._removed = False
        self._tail = ""

    @property
    def oom_killed(self) -> bool:
        """True when the engine killed the container for exceeding its memory limit."""
        return self._oom_killed

    def _poll(self) -> int | None:
        from docker.errors import NotFound

        try:
            state = self._client.api.inspect_container(self.container_id)["State"]
        except NotFound:
            self._exit_code = -1  # removed behind our back: certainly not running
            return self._exit_code
        if state.get("Status") in ("exited", "dead"):
            self._exit_code = int(state.get("ExitCode", -1))
            self._oom_killed = bool(state.get("OOMKilled"))
        return self._exit_code

    def wait(self, timeout: float) -> int | None:
        if self._exit_code is not None or self._removed:
            return self._exit_code
        if timeout > 0:
            import requests
            from docker.errors import NotFound

            try:
                self._client.api.wait(self.container_id, timeout=timeout)
            except (requests.exceptions.RequestException, NotFound):
                pass  # still running after `timeout` (or gone): _poll tells which
        return self._poll()

    def kill(self) -> None:
        from docker.errors import APIError

        if self._removed:
            return
        try:
            self._client.api.kill(self.container_id, signal="SIGKILL")
        except APIError as exc:
            if not _expected_api_error(exc):
                raise SandboxError(f"cannot kill sandbox container "
                                   f"{self.container_id[:12]}: {exc}") from None

    def cleanup(self) -> None:
        """Remove the container (killing it if needed); safe to call any number of times."""
        from docker.errors import DockerException

        with self._lock:
            if self._removed:
                return
            self._tail = self._read_tail()
            if self._exit_code is None:
                self._poll()
            try:
                self._client.api.remove_container(self.container_id, force=True, v=True)
            except DockerException as exc:
                if not _expected_api_error(exc):
                    # Stay registered: the atexit sweep tries again.
                    log.error("could not remove sandbox container %s: %s",
                              self.container_id[:12], exc)
                    return
            self._removed = True
        _LIVE.discard(self)

    def _read_tail(self) -> str:
        from docker.errors import DockerException

        try:
            raw = self._client.api.logs(self.container_id, stdout=True, stderr=True,
                                        tail=_LOG_TAIL_LINES)
        except DockerException:
            return self._tail
        limit = self._profile.log_tail_bytes
        return bytes(raw[-limit:]).decode("utf-8", "replace")

    def output(self) -> str:
        """At most ``log_tail_bytes`` of the end of stdout+stderr (also after cleanup)."""
        if self._removed:
            return self._tail
        return self._read_tail()


def _container_name(run_id: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:48] or "run"
    return f"revise-{safe}-{secrets.token_hex(4)}"


class DockerRunner(WarmLaunches):
    """Runs each job in a fresh hardened container built from the pinned image."""

    kind = "docker"
    isolation = ("docker sandbox: no network, read-only root, uid 10001, all capabilities "
                 "dropped, no-new-privileges, Revise seccomp profile, memory/cpu/pids limits")
    warnings: tuple[str, ...] = ()

    def __init__(self, settings: Settings, *, client: Any = None,
                 command: Sequence[str] | None = None, warm: int = 0,
                 warm_limits: SandboxLimits | None = None) -> None:
        """``command`` replaces the runtime command; tests use it to probe the profile.
        ``warm`` pre-starts that many containers for jobs with ``warm_limits`` (default
        limits; see ``sandbox.warm_pool``)."""
        self.settings = settings
        self._client = client
        self._command = tuple(command) if command is not None else None
        self._keep_warm(warm, warm_limits)

    @property
    def client(self) -> Any:
        if self._client is None:
            import docker
            from docker.errors import DockerException

            try:
                self._client = docker.from_env(timeout=60)
            except DockerException as exc:
                raise SandboxUnavailable(f"no Docker engine answers ({exc}); start one "
                                         "with `bash sandbox/engine.sh`") from None
        return self._client

    def profile(self, job: SandboxJob, image_id: str) -> SandboxProfile:
        profile = SandboxProfile(image=image_id, limits=job.limits)
        if self._command is not None:
            profile = profile.model_copy(update={"command": self._command})
        return profile

    def _launch_cold(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        return launch_cold(self._start, run_id, rpc_dir, limits)

    def _start(self, job: SandboxJob) -> DockerSandbox:
        from docker.errors import DockerException

        image_id = verify_image(self.client, self.settings)
        profile = self.profile(job, image_id)
        kwargs = profile.to_container_kwargs(job, owner=_owner())
        try:
            container = self.client.containers.create(name=_container_name(job.run_id),
                                                      **kwargs)
        except DockerException as exc:
            raise SandboxError(f"cannot create the sandbox container: {exc}") from None
        sandbox = DockerSandbox(self.client, str(container.id), profile)
        _LIVE.add(sandbox)
        try:
            container.start()
        except BaseException as exc:
            sandbox.cleanup()
            if isinstance(exc, DockerException):
                raise SandboxError(f"cannot start the sandbox container: {exc}") from None
            raise
        return sandbox


def remove_stale_containers(client: Any, *, run_id: str | None = None) -> list[str]:
    """Remove sandbox containers left behind by dead processes on this host.

    With ``run_id``, remove that run's containers whoever owns them. Returns the
    removed container ids. Containers of live processes are left alone.
    """
    from docker.errors import DockerException

    filters: dict[str, Any] = {"label": [f"{LABEL_SANDBOX}=1"]}
    if run_id is not None:
        filters["label"].append(f"{LABEL_RUN}={run_id}")
    removed: list[str] = []
    # Another process's sweep or cleanup may remove a listed container before it is inspected.
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        owner = (container.labels or {}).get(LABEL_OWNER, "")
        if run_id is None and not _owner_is_dead(owner):
            continue
        try:
            container.remove(force=True, v=True)
        except DockerException as exc:
            if not _expected_api_error(exc):
                raise
        removed.append(str(container.id))
    return removed


def _owner_is_dead(owner: str) -> bool:
    """Only an owner of this process table can be judged dead; a container of another host,
    namespace or token format (or unlabelled) is not ours to judge and stays."""
    return owner_alive(owner) is False

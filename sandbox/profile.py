"""The Docker sandbox policy as data.

``SandboxProfile`` says what a sandbox container may do; ``DockerRunner``
enforces it by passing ``to_container_kwargs`` to the Docker SDK. Keeping the
policy apart from the runner means it is reviewed, and tested, without an
engine: every isolation property is a field here and nowhere else.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from broker.envelope import SandboxLimits
from sandbox.job import SANDBOX_RPC_DIR, runtime_command

if TYPE_CHECKING:
    from sandbox.job import SandboxJob

SECCOMP_PATH = Path(__file__).with_name("seccomp.json")
SANDBOX_UID = 10001
RPC_MOUNT = SANDBOX_RPC_DIR
RUNTIME_COMMAND = tuple(runtime_command())
# Labels that mark our containers, so stale ones can be found and removed.
LABEL_SANDBOX = "revise.sandbox"
LABEL_RUN = "revise.run"
LABEL_OWNER = "revise.owner"
_MIB = 1024 * 1024


@cache
def seccomp_profile_json() -> str:
    """Our seccomp profile, compact, as the engine expects it in ``security_opt``."""
    return json.dumps(json.loads(SECCOMP_PATH.read_text(encoding="utf-8")),
                      separators=(",", ":"))


class SandboxProfile(BaseModel):
    """Everything a sandbox container is allowed, for one set of envelope limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    command: tuple[str, ...] = RUNTIME_COMMAND
    network: Literal["none"] = "none"
    read_only_root: Literal[True] = True
    user: str = f"{SANDBOX_UID}:{SANDBOX_UID}"
    cap_drop: tuple[str, ...] = ("ALL",)
    no_new_privileges: Literal[True] = True
    seccomp: str = Field(default_factory=seccomp_profile_json, repr=False)
    # No /dev/shm at all: the runtime needs no shared memory, and it is one less
    # writable mount that counts against nothing but the memory limit.
    ipc_mode: Literal["none", "private"] = "none"
    tmpfs_path: str = "/tmp"
    tmpfs_options: tuple[str, ...] = ("rw", "noexec", "nosuid", "nodev")
    working_dir: str = "/tmp"
    # The whole environment: nothing from the host, no credentials.
    environment: tuple[tuple[str, str], ...] = (
        ("PYTHONDONTWRITEBYTECODE", "1"), ("PYTHONHASHSEED", "0"))
    nofile: int = Field(default=256, ge=16)
    # Killed first if the host itself runs short of memory.
    oom_score_adj: int = Field(default=500, ge=0, le=1000)
    log_tail_bytes: int = Field(default=8192, ge=1024)

    @property
    def nproc(self) -> int:
        # RLIMIT_NPROC counts every process of uid 10001 on the host, across all
        # concurrent sandboxes; the per-container cap is pids_limit, this is the
        # backstop for kernels without the pids cgroup.
        return self.limits.pids * 4

    @property
    def fsize(self) -> int:
        # Nothing the sandbox writes reaches the host's disk (/rpc is read-only); this
        # bounds one file in the tmpfs below its size cap.
        return 4 * max(self.limits.output_bytes, self.limits.args_bytes)

    def tmpfs(self) -> dict[str, str]:
        size = f"size={self.limits.tmpfs_mb}m"
        return {self.tmpfs_path: ",".join((*self.tmpfs_options, size))}

    def security_opt(self) -> list[str]:
        return ["no-new-privileges:true", f"seccomp={self.seccomp}"]

    def to_container_kwargs(self, job: SandboxJob, *, owner: str = "") -> dict[str, Any]:
        """Keyword arguments for ``client.containers.create`` running ``job``."""
        from docker.types import LogConfig, Mount, Ulimit

        memory = f"{self.limits.memory_mb}m"
        return {
            "image": self.image,
            "command": list(self.command),
            "user": self.user,
            "network_mode": self.network,
            "read_only": self.read_only_root,
            "cap_drop": list(self.cap_drop),
            "security_opt": self.security_opt(),
            "ipc_mode": self.ipc_mode,
            "privileged": False,
            "mem_limit": memory,
            "memswap_limit": memory,  # same as memory: no swap to spill into
            "nano_cpus": int(self.limits.cpus * 1_000_000_000),
            "pids_limit": self.limits.pids,
            "oom_score_adj": self.oom_score_adj,
            "ulimits": [
                Ulimit(name="nofile", soft=self.nofile, hard=self.nofile),
                Ulimit(name="nproc", soft=self.nproc, hard=self.nproc),
                Ulimit(name="fsize", soft=self.fsize, hard=self.fsize),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "tmpfs": self.tmpfs(),
            # Only the RPC directory, read-only: it holds the host's listening socket,
            # which a read-only mount still lets the sandbox connect to.
            "mounts": [
                Mount(target=RPC_MOUNT, source=str(Path(job.rpc_dir).resolve()), type="bind",
                      read_only=True),
            ],
            "environment": dict(self.environment),
            "working_dir": self.working_dir,
            "hostname": "sandbox",
            "stdin_open": False,
            "tty": False,
            # The engine's copy of the output is bounded too, not only our tail of it.
            "log_config": LogConfig(type="json-file", config={
                "max-size": str(max(self.limits.output_bytes, 65536)), "max-file": "1"}),
            "labels": {LABEL_SANDBOX: "1", LABEL_RUN: job.run_id, LABEL_OWNER: owner},
        }

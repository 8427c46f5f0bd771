"""The process sandbox's seccomp filter: policy as data, compiled to classic BPF.

bubblewrap loads a compiled filter from a file descriptor (``--seccomp FD``)
just before it executes the sandboxed command, after setting no-new-privs.
``SeccompPolicy`` says what is refused; ``compile_bpf`` turns it into the
``struct sock_filter`` array for one architecture. The deny list is the Docker
profile's (``seccomp.json``), so both sandboxes refuse the same syscalls, and
the process sandbox adds what Docker gets from its network namespace: no socket
of any family but AF_UNIX (the runtime reaches ``/rpc/rpc.sock``; asyncio's
self-pipe is an AF_UNIX socketpair).

The program: a syscall of a foreign architecture (i386 via int 0x80, x32)
kills the process or fails; a denied syscall fails with its errno; ``clone``
with a namespace flag fails; ``socket``/``socketpair`` of another family fails
with EAFNOSUPPORT; ``prctl(PR_SET_PDEATHSIG)`` fails (the sandbox cannot stop
dying with its host); everything else is allowed.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import struct
from functools import cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox.syscalls import AUDIT_ARCH, SYSCALLS, X32_SYSCALL_BIT

# Every CLONE_NEW* flag clone(2) accepts: a sandbox makes no namespaces of its own.
CLONE_NAMESPACE_FLAGS = (0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000
                         | 0x20000000 | 0x40000000)
# prctl(PR_SET_PDEATHSIG): bwrap sets it so that the sandbox (its init included) dies
# with its host; nothing inside may clear it, even by writing into init's memory.
PR_SET_PDEATHSIG = 1
# Names the Docker profile lists that no supported architecture has (old ABIs).
ABSENT_EVERYWHERE = frozenset({"umount"})

# Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
_LD_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K
RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000
# Offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
_NR, _ARCH, _ARG0_LOW = 0, 4, 16  # args[0]'s low word on a little-endian machine


class SeccompPolicy(BaseModel):
    """What the filter refuses; everything it does not name is allowed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    deny: tuple[str, ...] = Field(min_length=1)  # fail with EPERM
    enosys: tuple[str, ...] = ("clone3",)  # ENOSYS: libc falls back to the filtered clone
    clone_denied_flags: int = CLONE_NAMESPACE_FLAGS
    socket_families: tuple[int, ...] = (socket.AF_UNIX,)  # any other: EAFNOSUPPORT
    prctl_denied: tuple[int, ...] = (PR_SET_PDEATHSIG,)  # these prctl options: EPERM
    default_action: Literal["allow"] = "allow"
    foreign_arch_action: Literal["kill"] = "kill"

    @field_validator("deny", "enosys")
    @classmethod
    def _known(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        known = set().union(*SYSCALLS.values()) | ABSENT_EVERYWHERE
        unknown = sorted(set(names) - known)
        if unknown:  # a typo must not leave a syscall allowed unnoticed
            raise ValueError(f"unknown syscall names: {', '.join(unknown)}")
        return names

    @classmethod
    def from_docker_profile(cls, profile: dict[str, Any]) -> SeccompPolicy:
        """The Docker profile's unconditional denials, same errno semantics."""
        deny = sorted({name for rule in profile["syscalls"] if not rule.get("args")
                       and rule.get("errnoRet", errno.EPERM) == errno.EPERM
                       for name in rule["names"]})
        enosys = sorted({name for rule in profile["syscalls"] if not rule.get("args")
                         and rule.get("errnoRet") == errno.ENOSYS for name in rule["names"]})
        return cls(deny=tuple(deny), enosys=tuple(enosys))


@cache
def default_policy() -> SeccompPolicy:
    from sandbox.profile import SECCOMP_PATH

    return SeccompPolicy.from_docker_profile(json.loads(SECCOMP_PATH.read_text("utf-8")))


def native_arch() -> str:
    machine = os.uname().machine
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


class _Program:
    """A few BPF instructions with forward jumps to labels."""

    def __init__(self) -> None:
        self.code: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (code, jt, jf, k) in enumerate(self.code):
            out += struct.pack("=HBBI", code, self._offset(index, jt), self._offset(index, jf), k)
        return bytes(out)

    def _offset(self, index: int, target: int | str) -> int:
        if isinstance(target, int):
            return target
        offset = self.labels[target] - index - 1
        if not 0 <= offset <= 255:
            raise ValueError(f"BPF jump to {target} out of range ({offset})")
        return offset


def compile_bpf(policy: SeccompPolicy, arch: str | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine's) as bwrap's ``--seccomp`` expects."""
    arch = arch or native_arch()
    if arch not in SYSCALLS:
        raise ValueError(f"no syscall table for {arch}; the process sandbox supports "
                         f"{', '.join(sorted(SYSCALLS))}")
    table = SYSCALLS[arch]
    p = _Program()
    p.op(_LD_ABS, _ARCH)
    p.op(_JEQ, AUDIT_ARCH[arch], 0, "kill")
    p.op(_LD_ABS, _NR)
    if arch == "x86_64":
        p.op(_JGE, X32_SYSCALL_BIT, "enosys", 0)
    for name in policy.deny:
        if name in table:
            p.op(_JEQ, table[name], "eperm", 0)
    for name in policy.enosys:
        if name in table:
            p.op(_JEQ, table[name], "enosys", 0)
    for name in ("socket", "socketpair"):
        p.op(_JEQ, table[name], "socket", 0)
    p.op(_JEQ, table["clone"], "clone", 0)
    p.op(_JEQ, table["prctl"], "prctl", 0)
    p.op(_RET, RET_ALLOW)
    p.label("prctl")
    p.op(_LD_ABS, _ARG0_LOW)
    for option in policy.prctl_denied:
        p.op(_JEQ, option, "eperm", 0)
    p.op(_RET, RET_ALLOW)
    p.label("socket")
    p.op(_LD_ABS, _ARG0_LOW)
    for family in policy.socket_families:
        p.op(_JEQ, family, "allow", 0)
    p.op(_RET, RET_ERRNO | errno.EAFNOSUPPORT)
    p.label("clone")
    p.op(_LD_ABS, _ARG0_LOW)
    p.op(_JSET, policy.clone_denied_flags, "eperm", "allow")
    p.label("allow")
    p.op(_RET, RET_ALLOW)
    p.label("eperm")
    p.op(_RET, RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(_RET, RET_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.op(_RET, RET_KILL_PROCESS)
    return p.assemble()

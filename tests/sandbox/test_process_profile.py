"""The process sandbox policy as data: bwrap argv, rlimits and the seccomp program,
checked without running anything (the BPF program runs in a small interpreter here)."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import resource
import socket
import struct

import pytest
from pydantic import ValidationError

from broker.envelope import SandboxLimits
from sandbox.process_profile import BwrapFds, ProcessProfile, host_root_layout
from sandbox.profile import SECCOMP_PATH
from sandbox.seccomp_bpf import (
    CLONE_NAMESPACE_FLAGS,
    RET_ALLOW,
    RET_ERRNO,
    RET_KILL_PROCESS,
    SeccompPolicy,
    compile_bpf,
    default_policy,
)
from sandbox.syscalls import AUDIT_ARCH, SYSCALLS, X32_SYSCALL_BIT

REQUIRED_DENIALS = {
    "ptrace", "process_vm_readv", "process_vm_writev", "mount", "umount2", "setns", "unshare",
    "pivot_root", "chroot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "userfaultfd", "open_by_handle_at", "reboot", "swapon", "swapoff",
}
FDS = BwrapFds(runtime_files=(("runtime.py", 5), ("language.py", 6)), seccomp=7, info=8)


def _argv(profile: ProcessProfile) -> list[str]:
    return profile.command_line("/x/bwrap", "/x/rpc", FDS)


def _pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == flag]


def _singles(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


def test_defaults_are_the_hardened_policy():
    profile = ProcessProfile()
    assert profile.namespaces == ("user", "ipc", "pid", "net", "uts")
    assert profile.read_only_root and profile.die_with_parent and profile.new_session
    assert profile.no_new_user_namespaces
    assert (profile.uid, profile.gid) == (10001, 10001)
    assert (profile.host_uid, profile.host_gid) == (65534, 65534)
    assert profile.ro_binds == ("/usr",)


def test_profile_is_frozen_and_cannot_be_weakened():
    profile = ProcessProfile()
    with pytest.raises(ValidationError):
        profile.uid = 0  # type: ignore[misc]
    for weaker in ({"uid": 0}, {"host_uid": 0}, {"read_only_root": False},
                   {"die_with_parent": False}, {"new_session": False},
                   {"no_new_user_namespaces": False}, {"namespaces": ("user", "mnt")},
                   {"namespaces": ("user", "pid", "ipc", "uts")}):
        with pytest.raises(ValidationError):
            ProcessProfile(**weaker)


def test_command_line_isolates():
    argv = _argv(ProcessProfile(limits=SandboxLimits(tmpfs_mb=16)))
    assert argv[0] == "/x/bwrap"
    for flag in ("--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net",
                 "--unshare-uts", "--disable-userns", "--die-with-parent", "--new-session",
                 "--clearenv"):
        assert flag in argv, flag
    assert "--share-net" not in argv and "--dev-bind" not in argv and "--bind" not in argv
    assert _singles(argv, "--uid") == ["10001"] and _singles(argv, "--gid") == ["10001"]
    assert _pairs(argv, "--ro-bind") == [("/usr", "/usr"), ("/x/rpc", "/rpc")]
    assert _singles(argv, "--remount-ro") == ["/dev", "/"]
    assert argv.index("--remount-ro", argv.index("--ro-bind-data")) > argv.index("/rpc")
    assert _singles(argv, "--tmpfs") == ["/tmp"]
    assert argv[argv.index("--tmpfs") - 2:argv.index("--tmpfs")] == ["--size", str(16 << 20)]
    assert _singles(argv, "--proc") == ["/proc"] and _singles(argv, "--dev") == ["/dev"]
    assert _pairs(argv, "--ro-bind-data") == [("5", "/opt/revise/runtime.py"),
                                              ("6", "/opt/revise/language.py")]
    assert _singles(argv, "--perms") == ["0444", "0444"]
    assert _singles(argv, "--seccomp") == ["7"] and _singles(argv, "--info-fd") == ["8"]
    assert _singles(argv, "--chdir") == ["/tmp"]


def test_the_command_is_the_runtime_under_the_sandbox_pids_limit():
    argv = _argv(ProcessProfile(limits=SandboxLimits(pids=40)))
    command = argv[argv.index("--") + 1:]
    assert command == ["/usr/bin/prlimit", "--nproc=40:40", "--", "/usr/bin/python3", "-I",
                       "-S", "-B", "/opt/revise/runtime.py", "/rpc/rpc.sock"]
    probe = ProcessProfile(command=("/usr/bin/python3", "-c", "pass"), prlimit=None)
    assert probe.sandbox_command() == ("/usr/bin/python3", "-c", "pass")


def test_environment_never_comes_from_the_host(monkeypatch):
    monkeypatch.setenv("REVISE_PROVIDER_API_KEY", "sk-secret")
    argv = _argv(ProcessProfile())
    env = dict(_pairs(argv, "--setenv"))
    assert env == {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/tmp", "TMPDIR": "/tmp",
                   "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0"}
    assert "sk-secret" not in " ".join(argv)


def test_rlimits_come_from_the_envelope():
    limits = SandboxLimits(memory_mb=256, pids=40, timeout_seconds=30)
    got = dict(ProcessProfile(limits=limits, nproc_ceiling=900).rlimits())
    assert got[resource.RLIMIT_AS] == 256 << 20
    assert got[resource.RLIMIT_CPU] == 31
    assert got[resource.RLIMIT_FSIZE] == 4 * 1_048_576
    assert got[resource.RLIMIT_NOFILE] == 64
    assert got[resource.RLIMIT_CORE] == 0
    assert got[resource.RLIMIT_NPROC] == 900  # uid-wide; prlimit sets 40 inside
    strict = dict(ProcessProfile(limits=limits, prlimit=None).rlimits())
    assert strict[resource.RLIMIT_NPROC] == 40  # without prlimit: the pids limit itself
    unprivileged = dict(ProcessProfile(limits=limits, nproc_ceiling=None).rlimits())
    assert resource.RLIMIT_NPROC not in unprivileged  # the host user's own limit stays


def test_host_root_layout_recreates_links_and_binds_real_dirs(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "sbin").mkdir()
    (tmp_path / "bin").symlink_to("/somewhere/else")
    assert host_root_layout(tmp_path) == ((("/lib", "usr/lib"),), ("/sbin",))


# -- seccomp ------------------------------------------------------------------------


def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Classic BPF, the instructions compile_bpf emits, over one seccomp_data."""
    data = struct.pack("=iIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    code = [struct.unpack_from("=HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif op == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[op]
            pc += 1 + (jt if taken else jf)


@pytest.mark.parametrize("arch", sorted(SYSCALLS))
def test_the_filter_denies_what_the_policy_denies(arch):
    table, audit = SYSCALLS[arch], AUDIT_ARCH[arch]
    program = compile_bpf(default_policy(), arch)

    def run(name: str, *args: int) -> int:
        return _run_bpf(program, table[name], audit, args)

    for name in REQUIRED_DENIALS:
        assert run(name) == RET_ERRNO | errno.EPERM, name
    assert run("clone3") == RET_ERRNO | errno.ENOSYS
    assert run("socket", socket.AF_UNIX, socket.SOCK_STREAM) == RET_ALLOW
    assert run("socketpair", socket.AF_UNIX) == RET_ALLOW
    for family in (socket.AF_INET, socket.AF_INET6, 16, 17, 38, 40):
        assert run("socket", family) == RET_ERRNO | errno.EAFNOSUPPORT, family
        assert run("socketpair", family) == RET_ERRNO | errno.EAFNOSUPPORT, family
    assert run("clone", 0x01200011) == RET_ALLOW  # what fork() passes
    for flag in (0x00020000, 0x10000000, 0x20000000, 0x40000000):
        assert run("clone", 0x01200011 | flag) == RET_ERRNO | errno.EPERM
    assert run("prctl", 1, 0) == RET_ERRNO | errno.EPERM  # PR_SET_PDEATHSIG
    assert run("prctl", 15, 0) == RET_ALLOW  # PR_SET_NAME
    assert _run_bpf(program, 0, audit) == RET_ALLOW  # read / io_setup: untouched
    assert _run_bpf(program, 0, 0x40000003) == RET_KILL_PROCESS  # i386 via int 0x80
    if arch == "x86_64":
        assert _run_bpf(program, X32_SYSCALL_BIT | 0, audit) == RET_ERRNO | errno.ENOSYS


def test_the_policy_is_the_docker_profiles_deny_list():
    profile = json.loads(SECCOMP_PATH.read_text())
    docker_denials = {name for rule in profile["syscalls"] if not rule.get("args")
                      and rule.get("errnoRet") == 1 for name in rule["names"]}
    policy = default_policy()
    assert set(policy.deny) == docker_denials
    assert REQUIRED_DENIALS <= set(policy.deny)
    assert policy.enosys == ("clone3",)
    assert policy.socket_families == (socket.AF_UNIX,)
    assert policy.clone_denied_flags == CLONE_NAMESPACE_FLAGS


def test_a_policy_with_an_unknown_syscall_is_refused():
    with pytest.raises(ValidationError, match="unknown syscall"):
        SeccompPolicy(deny=("ptrace", "ptrcae"))
    with pytest.raises(ValidationError):
        SeccompPolicy(deny=())
    with pytest.raises(ValueError, match="no syscall table"):
        compile_bpf(default_policy(), "riscv64")


def test_syscall_numbers_agree_with_libseccomp():
    path = ctypes.util.find_library("seccomp")
    if path is None:
        pytest.skip("libseccomp is not installed")
    lib = ctypes.CDLL(path)
    lib.seccomp_syscall_resolve_name_arch.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    for arch, table in SYSCALLS.items():
        for name, number in table.items():
            assert lib.seccomp_syscall_resolve_name_arch(AUDIT_ARCH[arch],
                                                         name.encode()) == number, (arch, name)

"""The Docker sandbox policy as data: no Docker engine needed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from broker.envelope import SandboxLimits
from sandbox.job import SandboxJob, runtime_command
from sandbox.profile import (
    RPC_MOUNT,
    RUNTIME_COMMAND,
    SECCOMP_PATH,
    SandboxProfile,
    seccomp_profile_json,
)

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "sandbox" / "image" / "Dockerfile"

REQUIRED_DENIALS = {
    "ptrace", "mount", "umount2", "keyctl", "add_key", "request_key", "bpf", "unshare", "setns",
    "perf_event_open", "kexec_load", "init_module", "finit_module", "delete_module",
    "pivot_root", "chroot", "swapon", "swapoff", "reboot", "open_by_handle_at",
    "process_vm_readv", "process_vm_writev", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register",
}
CLONE_NEWUSER = 0x10000000


@pytest.fixture
def job(tmp_path) -> SandboxJob:
    (tmp_path / "rpc").mkdir()
    return SandboxJob("run-7", tmp_path / "rpc",
                      SandboxLimits(memory_mb=256, cpus=0.5, pids=64, tmpfs_mb=16))


def _kwargs(job: SandboxJob) -> dict:
    return SandboxProfile(image="sha256:abc", limits=job.limits).to_container_kwargs(
        job, owner="host:1")


def test_defaults_are_the_hardened_policy():
    profile = SandboxProfile(image="img")
    assert profile.network == "none"
    assert profile.read_only_root is True
    assert profile.user == "10001:10001"
    assert profile.cap_drop == ("ALL",)
    assert profile.no_new_privileges is True
    assert profile.command == RUNTIME_COMMAND == tuple(runtime_command())
    assert RUNTIME_COMMAND == ("python3", "-I", "-S", "-B", "/opt/revise/runtime.py",
                               "/rpc/rpc.sock")
    assert profile.limits == SandboxLimits()


def test_profile_is_frozen_and_cannot_be_weakened():
    profile = SandboxProfile(image="img")
    with pytest.raises(ValidationError):
        profile.network = "bridge"  # type: ignore[misc]
    for weaker in ({"network": "host"}, {"read_only_root": False},
                   {"no_new_privileges": False}, {"privileged": True}):
        with pytest.raises(ValidationError):
            SandboxProfile(image="img", **weaker)


def test_container_kwargs_isolate_the_container(job):
    kwargs = _kwargs(job)
    assert kwargs["image"] == "sha256:abc"
    assert kwargs["network_mode"] == "none"
    assert kwargs["read_only"] is True
    assert kwargs["privileged"] is False
    assert kwargs["user"] == "10001:10001"
    assert kwargs["cap_drop"] == ["ALL"]
    assert "cap_add" not in kwargs
    assert kwargs["ipc_mode"] == "none"
    assert kwargs["working_dir"] == "/tmp"
    assert kwargs["command"] == list(RUNTIME_COMMAND)
    assert kwargs["labels"] == {"revise.sandbox": "1", "revise.run": "run-7",
                                "revise.owner": "host:1"}


def test_security_options_carry_our_seccomp_profile(job):
    options = _kwargs(job)["security_opt"]
    assert "no-new-privileges:true" in options
    [seccomp] = [o for o in options if o.startswith("seccomp=")]
    assert json.loads(seccomp.removeprefix("seccomp=")) == json.loads(SECCOMP_PATH.read_text())
    assert seccomp_profile_json() == seccomp.removeprefix("seccomp=")


def test_limits_come_from_the_envelope(job):
    kwargs = _kwargs(job)
    assert kwargs["mem_limit"] == "256m"
    assert kwargs["memswap_limit"] == "256m"  # no swap beyond the memory limit
    assert kwargs["nano_cpus"] == 500_000_000
    assert kwargs["pids_limit"] == 64
    assert kwargs["tmpfs"] == {"/tmp": "rw,noexec,nosuid,nodev,size=16m"}
    ulimits = {u["Name"]: (u["Soft"], u["Hard"]) for u in kwargs["ulimits"]}
    assert ulimits["nofile"] == (256, 256)
    assert ulimits["nproc"][0] >= 64
    assert ulimits["fsize"] == (4 * 1_048_576,) * 2
    assert ulimits["core"] == (0, 0)
    assert kwargs["log_config"]["Config"] == {"max-size": "1048576", "max-file": "1"}


def test_the_only_mount_is_the_rpc_directory_read_only(job):
    [mount] = _kwargs(job)["mounts"]
    assert mount["Target"] == RPC_MOUNT == "/rpc"
    assert mount["Source"] == str(job.rpc_dir.resolve())
    assert mount["ReadOnly"] is True
    assert mount["Type"] == "bind"


def test_environment_never_comes_from_the_host(job, monkeypatch):
    monkeypatch.setenv("REVISE_PROVIDER_API_KEY", "sk-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert _kwargs(job)["environment"] == {"PYTHONDONTWRITEBYTECODE": "1",
                                           "PYTHONHASHSEED": "0"}


def test_seccomp_profile_denies_the_escape_syscalls():
    profile = json.loads(SECCOMP_PATH.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    assert profile["architectures"] == ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"]
    rules = profile["syscalls"]
    assert all(rule["action"] == "SCMP_ACT_ERRNO" for rule in rules)  # a deny list only
    unconditional = {name for rule in rules if not rule.get("args") for name in rule["names"]}
    assert REQUIRED_DENIALS <= unconditional
    clone3 = [rule for rule in rules if rule["names"] == ["clone3"]]
    assert clone3 and clone3[0]["errnoRet"] == 38  # ENOSYS, so libc uses filtered clone


def test_seccomp_profile_filters_clone_namespace_flags():
    rules = json.loads(SECCOMP_PATH.read_text())["syscalls"]
    masks = {arg["value"] for rule in rules if rule["names"] == ["clone"]
             for arg in rule["args"] if arg["op"] == "SCMP_CMP_MASKED_EQ"
             and arg["index"] == 0 and arg["valueTwo"] == arg["value"]}
    assert CLONE_NEWUSER in masks
    assert {0x00020000, 0x20000000, 0x40000000} <= masks  # NEWNS, NEWPID, NEWNET


def test_dockerfile_adds_only_the_runtime_files():
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.M)
    copies = re.findall(r"^(?:COPY|ADD)\s+(.*)$", text, re.M)
    assert copies == ["runtime.py language.py /opt/revise/"]
    assert '"/opt/revise/runtime.py", "/rpc/rpc.sock"]' in text
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert '"python3"' in text and "/usr/local/bin/python" not in text

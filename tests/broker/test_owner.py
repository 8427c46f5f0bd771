"""Owner tokens: unique without unique hostnames, judged only inside their process table."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from broker.owner import current_owner, local_domain, owner_alive, process_owner

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "from broker.owner import current_owner; print(current_owner(), flush=True)"


def _token_of(*prefix: str, code: str = TOKEN) -> str:
    done = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _can_unshare() -> bool:
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode == 0


needs_unshare = pytest.mark.skipif(not _can_unshare(), reason="needs root and unshare")


def test_a_token_names_host_domain_boot_pid_start_and_thread() -> None:
    version, host, domain, boot, pid, start, thread = current_owner().split(":")
    assert (version, host, domain) == ("v2", socket.gethostname(), local_domain())
    assert len(boot) == 12 and int(pid) == os.getpid() and start.isdigit()
    assert int(thread) == threading.get_ident()
    assert current_owner().startswith(process_owner() + ":")


def test_threads_and_processes_never_share_a_token() -> None:
    other: list[str] = []
    thread = threading.Thread(target=lambda: other.append(current_owner()))
    thread.start()
    thread.join()
    assert other[0] != current_owner()
    assert other[0].rsplit(":", 1)[0] == process_owner()
    assert _token_of() != current_owner()


def test_a_forked_child_draws_its_own_boot_id() -> None:
    parent = process_owner()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: write its token and leave at once
        os.write(write, process_owner().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 400).decode()
    os.close(read)
    os.waitpid(pid, 0)
    assert child.split(":")[3] != parent.split(":")[3]
    assert child.split(":")[4] == str(pid)


def test_local_owners_are_judged_by_pid_and_start_time() -> None:
    assert owner_alive(current_owner()) is True
    dead = _token_of()  # that process has exited
    assert owner_alive(dead) is False
    parts = current_owner().split(":")
    parts[5] = str(int(parts[5]) + 1)  # this pid with another start time: a reused pid
    assert owner_alive(":".join(parts)) is False


def test_an_owner_that_ended_is_dead_before_it_is_reaped() -> None:
    """A zombie (a killed worker whose supervisor has not reaped it) is no owner: its
    attempts are unresolved at once, not after four leases."""
    import time

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, current_owner().encode())
        os._exit(0)
    os.close(write)
    token = os.read(read, 400).decode()
    os.close(read)
    try:
        deadline = time.monotonic() + 10
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert owner_alive(token) is False
    finally:
        os.waitpid(pid, 0)


@pytest.mark.parametrize("token", [
    "{host}:{pid}:0:1",  # the old host:pid:start:thread form
    "{host}:1",  # the old container label form
    "v2:elsewhere:0123456789abcdef:aaaaaaaaaaaa:1:1:1",  # another host's process table
    "", "v2:x", "v3:h:d:b:1:1:1",
])
def test_tokens_of_unknown_domains_are_never_judged(token: str) -> None:
    # (the test ids stay the same in every process: pytest -n collects in each worker)
    token = token.format(host=socket.gethostname(), pid=os.getpid())
    assert owner_alive(token) is None


@needs_unshare
def test_same_hostname_another_pid_namespace_is_not_judged() -> None:
    """Two containers with one hostname: the pid is in a table this process cannot see."""
    theirs = _token_of("unshare", "--pid", "--fork", "--mount-proc")
    assert theirs.split(":")[1] == socket.gethostname()
    assert theirs.split(":")[4] == "1"  # pid 1 here is another, live process
    assert owner_alive(theirs) is None


@needs_unshare
def test_another_hostname_is_judged_by_neither_side() -> None:
    code = ("import sys; from broker.owner import owner_alive, current_owner; "
            "print(owner_alive(sys.argv[1]), current_owner(), flush=True)")
    done = subprocess.run(["unshare", "--uts", "sh", "-c", 'hostname host-b && exec "$@"',
                           "sh", sys.executable, "-c", code, current_owner()],
                          capture_output=True, text=True, cwd=ROOT, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    verdict, theirs = done.stdout.split()
    assert verdict == "None", "host B judged a host-A process by its pid"
    assert theirs.split(":")[1] == "host-b"
    assert owner_alive(theirs) is None

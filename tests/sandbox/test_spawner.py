"""The sandbox launcher: processes started by a small helper, waited on and killed from
the host, given exactly the descriptors named, and gone when the host dies."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sandbox.spawner import Spawner, SpawnError, placeholder
from tests.waiting import until

PY = sys.executable


@pytest.fixture
def spawner():
    spawner = Spawner()
    yield spawner
    spawner.close()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _command_lines() -> list[tuple[int, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), (entry / "cmdline").read_bytes()))
            except OSError:
                continue
    return found


def test_the_exit_status_comes_back_and_a_wait_can_time_out(spawner, tmp_path) -> None:
    with open(tmp_path / "out", "wb") as out:
        quick = spawner.spawn([PY, "-c", "raise SystemExit(3)"], stdout=out.fileno(),
                              inherited=(), as_root=False)
        slow = spawner.spawn([PY, "-c", "import time; time.sleep(30)"], stdout=out.fileno(),
                             inherited=(), as_root=False)
    assert quick.wait(10) == 3 and quick.poll() == 3
    with pytest.raises(subprocess.TimeoutExpired):
        slow.wait(0.2)
    assert slow.poll() is None
    slow.kill()
    assert slow.wait(10) == -signal.SIGKILL
    slow.kill()  # ended: the pidfd is closed, nothing else is signalled


def test_the_process_gets_the_named_descriptors_and_the_rlimits(spawner, tmp_path) -> None:
    read_end, write_end = os.pipe()
    other_read, other_write = os.pipe()  # open in the host, not named: never inherited
    script = textwrap.dedent("""
        import json, os, resource, sys
        fd = int(sys.argv[1])
        names = os.listdir("/proc/self/fd")
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        os.write(fd, json.dumps([soft, len(names)]).encode())
    """)
    try:
        with open(tmp_path / "out", "wb") as out:
            proc = spawner.spawn([PY, "-c", script, placeholder(0)], stdout=out.fileno(),
                                 inherited=(write_end,), as_root=False,
                                 rlimits=((resource.RLIMIT_NOFILE, 50),))
        os.close(write_end)
        assert proc.wait(10) == 0, (tmp_path / "out").read_text()
        soft, count = json.loads(os.read(read_end, 4096))
    finally:
        for fd in (read_end, other_read, other_write):
            os.close(fd)
    assert soft == 50
    assert count == 5  # stdin, stdout, stderr, the pipe, the listing's own: nothing else


def test_a_start_that_fails_is_an_error_and_the_launcher_goes_on(spawner, tmp_path) -> None:
    with open(tmp_path / "out", "wb") as out:
        with pytest.raises(SpawnError, match="No such file"):
            spawner.spawn([str(tmp_path / "missing")], stdout=out.fileno(), inherited=(),
                          as_root=False)
        proc = spawner.spawn([PY, "-c", "pass"], stdout=out.fileno(), inherited=(),
                             as_root=False)
    assert proc.wait(10) == 0


HOST = textwrap.dedent("""
    import signal, sys, time
    sys.path.insert(0, sys.argv[1])
    for stop in (signal.SIGTERM, signal.SIGINT):  # as a Celery worker finishing its tasks
        signal.signal(stop, lambda number, frame: None)
    from sandbox.spawner import Spawner
    proc = Spawner().spawn([sys.executable, "-c", "import time; time.sleep(60)"],
                           stdout=1, inherited=(), as_root=False)
    print(proc.pid, flush=True)
    time.sleep(60)
""")


def test_the_launcher_and_what_it_started_die_with_their_host() -> None:
    root = Path(__file__).resolve().parents[2]
    host = subprocess.Popen([PY, "-c", HOST, str(root)], stdout=subprocess.PIPE)
    try:
        started = int(host.stdout.readline())
        helpers = [pid for pid, line in _command_lines() if b"spawner.py" in line
                   and line.endswith(f"\0{host.pid}\0".encode())]
        assert len(helpers) == 1 and _alive(started)
        host.send_signal(signal.SIGKILL)
        host.wait(10)
        assert until(lambda: not _alive(helpers[0]) and not _alive(started))
    finally:
        host.kill()
        host.wait()
        host.stdout.close()


def test_a_signal_to_the_hosts_process_group_does_not_reach_the_launcher() -> None:
    """A supervisor stops a worker by signalling its process group (honcho, Ctrl-C in a
    terminal): the worker finishes its jobs (warm shutdown), so the sandboxes they run
    must not die of that signal on the way (they did: each job ended stopped)."""
    root = Path(__file__).resolve().parents[2]
    host = subprocess.Popen([PY, "-c", HOST, str(root)], stdout=subprocess.PIPE,
                            start_new_session=True)
    try:
        started = int(host.stdout.readline())
        os.killpg(host.pid, signal.SIGTERM)
        os.killpg(host.pid, signal.SIGINT)
        assert not until(lambda: not _alive(started), 1.0)
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()
        host.stdout.close()

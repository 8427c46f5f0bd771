"""Who owns a pending attempt (or a job lease, or a sandbox container), and whether it lives.

An owner token is ``v2:<host>:<domain>:<boot>:<pid>:<start>:<thread>``:

* ``domain`` names the process table the pid belongs to: a hash of the
  hostname, the kernel's boot id and the pid namespace. Two machines (or two
  containers) that share a hostname still differ in it, so a pid is only ever
  read against the process table it came from;
* ``boot`` is random, drawn when the process first makes a token (after a
  fork the child draws its own), so two tokens never collide even when pid
  and start time do (a copied VM image, a reused pid in another namespace);
* ``start`` is the process start time from /proc (a reused pid has another).

Liveness is judged here only for tokens of this domain (``owner_alive``:
True/False); any other token, including the older ``host:pid:start:thread``
form, is ``None``: not judged dead, ever. Across hosts liveness comes only
from the heartbeat lease: an attempt's heartbeat older than
``REVISE_ATTEMPT_LEASE_SECONDS`` (the owner beats every third of it), a job
lease in Redis that its holder stopped renewing (``workers.lease``).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
import threading
from functools import cache

VERSION = "v2"


def _start_ticks(pid: int) -> str | None:
    """When the living process ``pid`` started; None when there is none (a zombie has
    ended: its parent has not reaped it yet, as a supervisor that does not reap)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else fields[19]  # state; field 22, starttime
    except (OSError, IndexError):
        return None


def _read(path: str) -> str:
    try:
        if path.startswith("/proc/self/ns/"):
            return os.readlink(path)
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def local_domain() -> str:
    """This process table: hostname + kernel boot id + pid namespace (not cached: a
    process can enter another UTS namespace after import, as the tests do)."""
    seen = "\0".join((socket.gethostname(), _read("/proc/sys/kernel/random/boot_id"),
                      _read("/proc/self/ns/pid")))
    return hashlib.sha256(seen.encode()).hexdigest()[:16]


@cache
def _token_for(pid: int) -> str:
    # Keyed by pid: a forked child (prefork pool) gets its own boot id and start time.
    host = socket.gethostname().replace(":", "_")[:64]
    return (f"{VERSION}:{host}:{local_domain()}:{secrets.token_hex(6)}:{pid}:"
            f"{_start_ticks(pid) or '0'}")


def process_owner() -> str:
    """Token of this process (sandbox containers are labelled with it)."""
    return _token_for(os.getpid())


def current_owner() -> str:
    """Token of this process plus thread, so two threads never share an attempt."""
    return f"{process_owner()}:{threading.get_ident()}"


def owner_alive(owner: str) -> bool | None:
    """True/False when ``owner`` is of this process table; None for any other (unknown
    host or namespace, a malformed or older token): the caller then waits for the lease."""
    parts = owner.split(":")
    pid = pid_of(owner)
    if pid is None or parts[2] != local_domain():
        return None
    return _start_ticks(pid) == parts[5]


def pid_of(owner: str) -> int | None:
    """The pid in a well-formed token (meaningful only in the token's own domain)."""
    parts = owner.split(":")
    if len(parts) not in (6, 7) or parts[0] != VERSION or not parts[4].isdigit():
        return None
    return int(parts[4])

"""Who owns a pending attempt, and whether that owner is still alive.

An owner token is ``host:pid:start`` where ``start`` is the process start time
from /proc. On the same host a dead owner is detected at once (pid gone, or
reused by a process with another start time); on another host only the
attempt's heartbeat lease can tell, so a stale heartbeat marks it unresolved.
"""

from __future__ import annotations

import os
import socket
import threading
from functools import cache


def _start_ticks(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[19]  # field 22 (starttime), counted after the ")" of comm
    except (OSError, IndexError):
        return None


@cache
def _token_for(pid: int) -> str:
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '0'}"


def current_owner() -> str:
    """Token of this process (plus thread, so two threads never share an attempt)."""
    return f"{_token_for(os.getpid())}:{threading.get_ident()}"


def owner_alive(owner: str) -> bool | None:
    """True/False when it can be told from here, None for another host."""
    try:
        host, pid, start, _thread = owner.split(":")
    except ValueError:
        return None
    if host != socket.gethostname():
        return None
    return _start_ticks(int(pid)) == start

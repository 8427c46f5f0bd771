"""The commit spool: a paid result kept on local disk while the run store does not answer.

The provider answered, so the call is paid; if the commit transaction then
fails (the database is down, restarting, unreachable), the result must not be
lost. ``CommitSpool.keep`` writes the slot and its attempt id as one JSON file,
fsynced (file and directory) before it returns; the broker retries the commit
with backoff and removes the file once the store has it. A worker that dies
in between finds the file on restart and drains it first (``drain``).

The spool is written only when a commit fails, never on the hot path. Files are
claimed with ``flock`` while drained, so several worker processes on one host
can share the directory; a commit is idempotent on the identity, so a file
committed twice (a crash between commit and unlink) commits once.

``keep`` never fails: a full or unwritable spool directory falls back to the next
directory that has room (a private one under the system temp directory by
default), and past every disk to this process's memory, where the result waits for
the drain like a file does (it is lost only if the process dies too). The spool
says it is ``degraded`` and why, and the broker reports it loudly.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from broker.identity import Identity
from broker.records import SlotRecord

log = logging.getLogger("revise.spool")

_SUFFIX = ".commit.json"


@dataclass(frozen=True)
class Spooled:
    path: Path | InMemory
    slot: SlotRecord
    attempt_id: int | None


@dataclass(frozen=True, eq=False)
class InMemory:
    """A paid result kept in this process's memory because no spool disk took it."""

    slot: SlotRecord
    attempt_id: int | None

    def __str__(self) -> str:
        return f"memory (pid {os.getpid()}; no spool directory had room)"


def default_fallbacks() -> tuple[Path, ...]:
    return (Path(tempfile.gettempdir()) / f"revise-spool-{os.getuid()}",)


def slot_to_json(slot: SlotRecord) -> dict[str, Any]:
    return {"run_id": slot.run_id, "identity": str(slot.identity),
            "capability": slot.capability, "digest": slot.digest,
            "fingerprint": slot.fingerprint, "result": slot.result, "usage": dict(slot.usage),
            "cost": slot.cost, "revision": slot.revision,
            "committed_at": None if slot.committed_at is None
            else slot.committed_at.isoformat(),
            "chain_fingerprint": slot.chain_fingerprint, "line": slot.line}


def slot_from_json(data: dict[str, Any]) -> SlotRecord:
    at = data.get("committed_at")
    return SlotRecord(run_id=data["run_id"], identity=Identity.parse(data["identity"]),
                      capability=data["capability"], digest=data["digest"],
                      fingerprint=data["fingerprint"], result=data["result"],
                      usage=data.get("usage") or {}, cost=float(data.get("cost") or 0.0),
                      revision=int(data["revision"]),
                      committed_at=None if at is None else datetime.fromisoformat(at),
                      chain_fingerprint=data.get("chain_fingerprint") or "",
                      line=data.get("line"))


class CommitSpool:
    def __init__(self, directory: Path, *, fallbacks: tuple[Path, ...] | None = None) -> None:
        self.directory = Path(directory)
        self.fallbacks = default_fallbacks() if fallbacks is None else tuple(fallbacks)
        self.degraded: str | None = None  # why the last keep did not use ``directory``
        self._memory: list[InMemory] = []
        self._lock = threading.Lock()

    def keep(self, slot: SlotRecord, attempt_id: int | None) -> Path | InMemory:
        """Keep the paid result: fsynced in the first directory that takes it, else in
        memory. Never raises."""
        data = json.dumps({"slot": slot_to_json(slot), "attempt_id": attempt_id},
                          sort_keys=True, default=str).encode("utf-8")
        problems = []
        for directory in (self.directory, *self.fallbacks):
            try:
                path = _write_durably(directory, data)
            except OSError as exc:
                problems.append(f"{directory}: {exc.strerror or exc}")
                continue
            self.degraded = None if directory == self.directory else "; ".join(problems)
            if self.degraded:
                log.error("commit spool %s cannot be written (%s); the paid result at %s "
                          "is kept in %s", self.directory, self.degraded, slot.identity, path)
            return path
        kept = InMemory(slot, attempt_id)
        with self._lock:
            self._memory.append(kept)
        self.degraded = "; ".join(problems)
        log.error("no spool directory takes the paid result at %s in run %s (%s); it is "
                  "kept in memory until the store answers", slot.identity, slot.run_id,
                  self.degraded)
        return kept

    def remove(self, kept: Path | InMemory) -> None:
        if isinstance(kept, InMemory):
            with self._lock:
                if kept in self._memory:
                    self._memory.remove(kept)
            return
        kept.unlink(missing_ok=True)
        _sync_dir(kept.parent)

    def pending(self) -> list[Path | InMemory]:
        found: list[Path | InMemory] = []
        for directory in (self.directory, *self.fallbacks):
            if directory.is_dir():
                found.extend(sorted(directory.glob(f"*{_SUFFIX}")))
        with self._lock:
            found.extend(self._memory)
        return found

    @contextmanager
    def claim(self, path: Path | InMemory) -> Iterator[Spooled | None]:
        """The spooled commit at ``path`` held alone (None: another process holds it or
        it is gone)."""
        if isinstance(path, InMemory):
            yield Spooled(path, path.slot, path.attempt_id)
            return
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            yield None
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield None
                return
            if not path.exists():  # drained by the holder we waited behind
                yield None
                return
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = json.loads(handle.read())
            yield Spooled(path, slot_from_json(data["slot"]), data.get("attempt_id"))
        finally:
            os.close(fd)

    def drain(self, commit: Callable[[SlotRecord, int | None], Any]) -> int:
        """Commit every spooled result; a file stays when its commit raises. Returns how
        many were committed."""
        done = 0
        for path in self.pending():
            with self.claim(path) as spooled:
                if spooled is None:
                    continue
                try:
                    commit(spooled.slot, spooled.attempt_id)
                except Exception as exc:  # the store is still away: keep the file
                    log.warning("spooled commit %s of %s in run %s is kept: %s", path,
                                spooled.slot.identity, spooled.slot.run_id, exc)
                    continue
                self.remove(path)
                done += 1
                log.warning("spooled commit of %s in run %s is now in the store",
                            spooled.slot.identity, spooled.slot.run_id)
        return done


def _write_durably(directory: Path, data: bytes) -> Path:
    """``data`` as a new spool file in ``directory``, file and directory fsynced; a file
    that could not be written whole is removed (a reader sees a whole file or none)."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = directory / f"{uuid.uuid4().hex}{_SUFFIX}"
    partial = final.with_suffix(".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            if os.write(fd, data) != len(data):
                raise OSError(28, "short write (disk full?)")
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, final)
    except OSError:
        partial.unlink(missing_ok=True)
        raise
    _sync_dir(directory)
    return final


def _sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

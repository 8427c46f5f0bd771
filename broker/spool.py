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
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
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
    path: Path
    slot: SlotRecord
    attempt_id: int | None


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
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def keep(self, slot: SlotRecord, attempt_id: int | None) -> Path:
        """Write the paid result durably (file and directory fsynced); returns its path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.directory / f"{uuid.uuid4().hex}{_SUFFIX}"
        partial = final.with_suffix(".partial")
        data = json.dumps({"slot": slot_to_json(slot), "attempt_id": attempt_id},
                          sort_keys=True, default=str).encode("utf-8")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, final)  # a reader sees a whole file or none
        self._sync_dir()
        return final

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def pending(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(self.directory.glob(f"*{_SUFFIX}"))

    @contextmanager
    def claim(self, path: Path) -> Iterator[Spooled | None]:
        """The spooled commit at ``path`` held alone (None: another process holds it or
        it is gone)."""
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
                    log.warning("spooled commit %s of %s in run %s is kept: %s", path.name,
                                spooled.slot.identity, spooled.slot.run_id, exc)
                    continue
                self.remove(path)
                done += 1
                log.warning("spooled commit of %s in run %s is now in the store",
                            spooled.slot.identity, spooled.slot.run_id)
        return done

"""Artifact bytes kept on local disk while the artifact store does not answer.

A provider call is paid when it answers; its bytes (an image) then go to the
artifact store. On a deployment that store is the run store's PostgreSQL or S3,
which can be away exactly when the answer arrives. ``SpoolingArtifactStore``
wraps the store the providers write to: when a ``put`` finds the store away, the
bytes are written to ``directory`` (fsynced, named by their content id) and the
reference is returned as the store would have made it (the id is the bytes'
hash), so the call's result goes on to its commit (or the commit spool) and is
never paid again. ``drain`` uploads the kept bytes once the store answers; a
broker worker drains on start, before its commit spool. Until then reads of a
kept artifact are served from the local file. A full spool disk never turns the paid
answer into a failure: the bytes go to the next directory with room (a private one
under the system temp directory), past every disk to this process's memory, and the
spool says it is ``degraded`` (as the commit spool does, ``broker.spool``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from broker.artifacts import ArtifactRef, ArtifactStore, RefOrId, artifact_id, id_of
from broker.errors import ConfigError, StoreUnavailable

log = logging.getLogger("revise.spool")

_SUFFIX = ".artifact"


def default_fallbacks() -> tuple[Path, ...]:
    return (Path(tempfile.gettempdir()) / f"revise-artifact-spool-{os.getuid()}",)


class SpoolingArtifactStore:
    """``fallbacks``: directories tried when ``directory`` cannot take the bytes (a full
    disk), as the commit spool does; past every disk the bytes wait in this process's
    memory. Keeping never raises: the paid answer goes on to its commit."""

    def __init__(self, inner: ArtifactStore, directory: Path, *,
                 fallbacks: tuple[Path, ...] | None = None) -> None:
        self.inner = inner
        self.directory = Path(directory)
        self.fallbacks = default_fallbacks() if fallbacks is None else tuple(fallbacks)
        self.where = inner.where
        self.degraded: str | None = None  # why the last keep did not use ``directory``
        self._memory: dict[str, tuple[str, bytes]] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        try:
            return self.inner.put(data, media_type)
        except (StoreUnavailable, ConfigError) as exc:
            # ConfigError: the store answers but refuses (its bucket gone, its credentials
            # revoked); the answer is paid all the same, so its bytes wait for the fix.
            ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
            kept = self._keep(ref, data)
            log.warning("artifact %s kept in %s while %s does not answer (%s)", ref.id,
                        kept, self.where, exc.message)
            return ref

    def _directories(self) -> tuple[Path, ...]:
        return (self.directory, *self.fallbacks)

    def _file(self, artifact: str, directory: Path | None = None) -> Path:
        return (directory or self.directory) / f"{artifact.removeprefix('sha256:')}{_SUFFIX}"

    def _keep(self, ref: ArtifactRef, data: bytes) -> str:
        problems = []
        for directory in self._directories():
            try:
                self._write(directory, ref, data)
            except OSError as exc:
                problems.append(f"{directory}: {exc.strerror or exc}")
                continue
            self.degraded = "; ".join(problems) or None
            if self.degraded:
                log.error("artifact spool %s cannot be written (%s); artifact %s is kept in "
                          "%s", self.directory, self.degraded, ref.id, directory)
            return str(directory)
        with self._lock:
            self._memory[ref.id] = (ref.media_type, data)
        self.degraded = "; ".join(problems)
        log.error("no artifact spool directory takes artifact %s (%s); it is kept in memory "
                  "until its store answers", ref.id, self.degraded)
        return f"memory (pid {os.getpid()})"

    def _write(self, directory: Path, ref: ArtifactRef, data: bytes) -> None:
        """The bytes as a whole file or none (a partial file is removed)."""
        directory.mkdir(parents=True, exist_ok=True)
        final = self._file(ref.id, directory)
        partial = final.with_suffix(f".{os.getpid()}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                body = ref.media_type.encode("ascii", "replace") + b"\n" + data
                if os.write(fd, body) != len(body):
                    raise OSError(28, "short write (disk full?)")
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(partial, final)  # content-addressed: a second copy is the same bytes
        except OSError:
            partial.unlink(missing_ok=True)
            raise
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _kept(self, artifact: str) -> tuple[str, bytes] | None:
        for directory in self._directories():
            try:
                media_type, _, data = self._file(artifact, directory).read_bytes() \
                    .partition(b"\n")
            except FileNotFoundError:
                continue
            return media_type.decode("ascii"), data
        with self._lock:
            return self._memory.get(artifact)

    def pending(self) -> list[Path | str]:
        """Kept files, then the ids of artifacts kept in memory."""
        found: list[Path | str] = []
        for directory in self._directories():
            if directory.is_dir():
                found.extend(sorted(directory.glob(f"*{_SUFFIX}")))
        with self._lock:
            found.extend(self._memory)
        return found

    def drain(self) -> int:
        """Upload every kept artifact; a file stays while the store is away."""
        done = 0
        for item in self.pending():
            artifact = item if isinstance(item, str) else \
                f"sha256:{item.name.removesuffix(_SUFFIX)}"
            kept = self._kept(artifact)
            if kept is None:
                continue
            try:
                self.inner.put(kept[1], kept[0])
            except (StoreUnavailable, ConfigError) as exc:
                log.warning("kept artifact %s stays in the spool: %s", artifact, exc.message)
                continue
            if isinstance(item, str):
                with self._lock:
                    self._memory.pop(item, None)
            else:
                item.unlink(missing_ok=True)
            done += 1
        return done

    def get(self, ref_or_id: RefOrId) -> bytes:
        return b"".join(self.stream(ref_or_id))

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]:
        kept = self._kept(id_of(ref_or_id))
        if kept is not None:
            return iter([kept[1]])
        return self.inner.stream(ref_or_id)

    def exists(self, artifact: str) -> bool:
        return self._kept(id_of(artifact)) is not None or self.inner.exists(artifact)

    def path(self, artifact: str) -> Path | None:
        return self.inner.path(artifact)

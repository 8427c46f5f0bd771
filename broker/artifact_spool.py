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
kept artifact are served from the local file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from broker.artifacts import ArtifactRef, ArtifactStore, RefOrId, artifact_id, id_of
from broker.errors import StoreUnavailable

log = logging.getLogger("revise.spool")

_SUFFIX = ".artifact"


class SpoolingArtifactStore:
    def __init__(self, inner: ArtifactStore, directory: Path) -> None:
        self.inner = inner
        self.directory = Path(directory)
        self.where = inner.where

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        try:
            return self.inner.put(data, media_type)
        except StoreUnavailable as exc:
            ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
            self._keep(ref, data)
            log.warning("artifact %s kept in %s while %s does not answer (%s)", ref.id,
                        self.directory, self.where, exc.message)
            return ref

    def _file(self, artifact: str) -> Path:
        return self.directory / f"{artifact.removeprefix('sha256:')}{_SUFFIX}"

    def _keep(self, ref: ArtifactRef, data: bytes) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self._file(ref.id)
        partial = final.with_suffix(f".{os.getpid()}.partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, ref.media_type.encode("ascii", "replace") + b"\n" + data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(partial, final)  # content-addressed: a second copy is the same bytes
        dir_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)

    def _kept(self, artifact: str) -> tuple[str, bytes] | None:
        try:
            media_type, _, data = self._file(artifact).read_bytes().partition(b"\n")
        except FileNotFoundError:
            return None
        return media_type.decode("ascii"), data

    def pending(self) -> list[Path]:
        return sorted(self.directory.glob(f"*{_SUFFIX}")) if self.directory.is_dir() else []

    def drain(self) -> int:
        """Upload every kept artifact; a file stays while the store is away."""
        done = 0
        for path in self.pending():
            kept = self._kept(f"sha256:{path.name.removesuffix(_SUFFIX)}")
            if kept is None:
                continue
            try:
                self.inner.put(kept[1], kept[0])
            except StoreUnavailable as exc:
                log.warning("kept artifact %s stays in the spool: %s", path.name, exc.message)
                continue
            path.unlink(missing_ok=True)
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

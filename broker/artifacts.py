"""Content-addressed artifact storage.

A provider that produces bytes (an image) stores them here and hands the
script a small JSON reference instead of the bytes. The id is the SHA-256 of
the content, so storing the same bytes twice is a no-op and a replayed result
points at exactly the artifact the original call produced.

An artifact id becomes a file name (``root/ab/cd/<hex>``), so it is accepted
only whole (``fullmatch``: no trailing newline, nothing around it) and only
as ``sha256:`` plus 64 lowercase hex digits; the path is built from the hex
digits alone.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from broker.errors import InputError
from broker.identity import sha256_hex

_ID = re.compile(r"sha256:(?P<hex>[0-9a-f]{64})")  # always used with fullmatch
URI_SCHEME = "artifact://"


class ArtifactNotFound(InputError):
    code = "artifact_not_found"


class ArtifactCorrupt(InputError):
    code = "artifact_corrupt"


def artifact_id(data: bytes) -> str:
    return f"sha256:{sha256_hex(data)}"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 90 else f"{text[:80]}... ({len(text)} characters)"


def _hex_of(artifact: object) -> str:
    text = artifact.removeprefix(URI_SCHEME) if isinstance(artifact, str) else None
    match = _ID.fullmatch(text) if text is not None else None
    if not match:
        raise InputError(f"{_shown(artifact)} is not an artifact id; expected "
                         "'sha256:<64 hex>' or 'artifact://sha256:<64 hex>'",
                         artifact=_shown(artifact))
    return match["hex"]


@dataclass(frozen=True)
class ArtifactRef:
    """What a result carries instead of the bytes."""

    id: str
    media_type: str
    size: int

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not _ID.fullmatch(self.id):
            raise InputError(f"{_shown(self.id)} is not an artifact id; expected "
                             "'sha256:<64 hex>'", artifact=_shown(self.id))
        if self.size < 0:
            raise ValueError(f"artifact size must be >= 0, got {self.size}")

    @property
    def uri(self) -> str:
        return f"{URI_SCHEME}{self.id}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "media_type": self.media_type, "bytes": self.size,
                "uri": self.uri}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ArtifactRef:
        try:
            return cls(id=str(value["id"]), media_type=str(value["media_type"]),
                       size=int(value["bytes"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"not an artifact reference ({exc}); expected an object with "
                             "'id', 'media_type' and 'bytes'") from None


RefOrId = ArtifactRef | str | dict


def _id_of(ref_or_id: RefOrId) -> str:
    if isinstance(ref_or_id, ArtifactRef):
        return ref_or_id.id
    if isinstance(ref_or_id, dict):
        return ArtifactRef.from_json(ref_or_id).id
    return f"sha256:{_hex_of(ref_or_id)}"


@runtime_checkable
class ArtifactStore(Protocol):
    def put(self, data: bytes, media_type: str) -> ArtifactRef: ...

    def get(self, ref_or_id: RefOrId) -> bytes: ...

    def exists(self, artifact: str) -> bool: ...

    def path(self, artifact: str) -> Path | None: ...


class FileArtifactStore:
    """Files under ``root/ab/cd/<hex>``; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, artifact: RefOrId) -> Path:
        hex_ = _hex_of(_id_of(artifact))
        return self.root / hex_[:2] / hex_[2:4] / hex_

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
        target = self.path(ref.id)
        if target.exists():
            return ref  # content-addressed: the same id means the same bytes
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return ref

    def get(self, ref_or_id: RefOrId) -> bytes:
        artifact = _id_of(ref_or_id)
        try:
            data = self.path(artifact).read_bytes()
        except FileNotFoundError:
            raise ArtifactNotFound(f"artifact {artifact} is not in {self.root}",
                                   artifact=artifact) from None
        if artifact_id(data) != artifact:
            raise ArtifactCorrupt(f"artifact {artifact} at {self.path(artifact)} does not "
                                  "match its hash; delete the file and re-run the call",
                                  artifact=artifact)
        return data

    def exists(self, artifact: RefOrId) -> bool:
        return self.path(artifact).is_file()


class MemoryArtifactStore:
    """In-memory stand-in with the same contract (tests, dry runs)."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
        with self._lock:
            self._data.setdefault(ref.id, bytes(data))
        return ref

    def get(self, ref_or_id: RefOrId) -> bytes:
        artifact = _id_of(ref_or_id)
        with self._lock:
            data = self._data.get(artifact)
        if data is None:
            raise ArtifactNotFound(f"artifact {artifact} is not in memory", artifact=artifact)
        return data

    def exists(self, artifact: RefOrId) -> bool:
        with self._lock:
            return _id_of(artifact) in self._data

    def path(self, artifact: RefOrId) -> None:
        return None

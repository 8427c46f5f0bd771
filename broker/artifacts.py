"""Content-addressed artifact storage.

A provider that produces bytes (an image) stores them here and hands the
script a small JSON reference instead of the bytes. The id is the SHA-256 of
the content, so storing the same bytes twice is a no-op and a replayed result
points at exactly the artifact the original call produced.

An artifact id becomes a file name (``root/ab/cd/<hex>``), so it is accepted
only whole (``fullmatch``: no trailing newline, nothing around it) and only
as ``sha256:`` plus 64 lowercase hex digits; the path is built from the hex
digits alone.

Every store has the same contract (``tests/broker/test_artifact_stores.py``
runs it over file, memory, PostgreSQL and S3): ``put`` refuses more than
``max_bytes`` (``REVISE_ARTIFACT_MAX_BYTES``), ``stream`` yields the bytes in
chunks and checks the hash at the end, so a reader never trusts a damaged
copy. ``where`` names the store for people (`revise show`, errors).
The shared stores live in ``broker.artifacts_sql`` and ``broker.artifacts_s3``;
``broker.artifact_stores.open_artifact_store`` picks one from the settings.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from broker.errors import InputError, StoreUnavailable
from broker.identity import sha256_hex

_ID = re.compile(r"sha256:(?P<hex>[0-9a-f]{64})")  # always used with fullmatch
URI_SCHEME = "artifact://"


class ArtifactNotFound(InputError):
    code = "artifact_not_found"


class ArtifactCorrupt(InputError):
    code = "artifact_corrupt"


class ArtifactTooLarge(InputError):
    code = "artifact_too_large"
    size: int  # bytes
    max_bytes: int


CHUNK_BYTES = 1 << 20  # how much of an artifact is read, written or held at once
DEFAULT_MAX_BYTES = 64 << 20


def check_size(size: int, max_bytes: int | None, where: str) -> None:
    if max_bytes is not None and size > max_bytes:
        raise ArtifactTooLarge(
            f"an artifact of {size} bytes is over the limit of {max_bytes} bytes of {where}; "
            "raise REVISE_ARTIFACT_MAX_BYTES or have the provider return a smaller result",
            size=size, max_bytes=max_bytes)


def verified(artifact: str, chunks: Iterable[bytes], where: str) -> Iterator[bytes]:
    """Yield ``chunks``; at the end raise ``ArtifactCorrupt`` unless they hash to the id."""
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
        yield chunk
    if f"sha256:{digest.hexdigest()}" != artifact:
        raise ArtifactCorrupt(f"artifact {artifact} in {where} does not match its hash; "
                              "delete the stored copy and re-run the call", artifact=artifact)


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


def id_of(ref_or_id: RefOrId) -> str:
    """The ``sha256:<hex>`` id of a ref, its JSON, an id or an ``artifact://`` URI."""
    return _id_of(ref_or_id)


def _id_of(ref_or_id: RefOrId) -> str:
    if isinstance(ref_or_id, ArtifactRef):
        return ref_or_id.id
    if isinstance(ref_or_id, dict):
        return ArtifactRef.from_json(ref_or_id).id
    return f"sha256:{_hex_of(ref_or_id)}"


@runtime_checkable
class ArtifactStore(Protocol):
    where: str  # the store, named for people

    def put(self, data: bytes, media_type: str) -> ArtifactRef: ...

    def get(self, ref_or_id: RefOrId) -> bytes: ...

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]: ...

    def exists(self, artifact: str) -> bool: ...

    def path(self, artifact: str) -> Path | None: ...


class FileArtifactStore:
    """Files under ``root/ab/cd/<hex>``; writes are atomic (temp file + rename)."""

    def __init__(self, root: Path, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.where = f"the file store {self.root}"

    def path(self, artifact: RefOrId) -> Path:
        hex_ = _hex_of(_id_of(artifact))
        return self.root / hex_[:2] / hex_[2:4] / hex_

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        check_size(len(data), self.max_bytes, self.where)
        ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
        target = self.path(ref.id)
        if target.exists():
            return ref  # content-addressed: the same id means the same bytes
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        except OSError as exc:
            raise self._away(ref, exc) from exc
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except BaseException as exc:
            Path(tmp).unlink(missing_ok=True)
            if isinstance(exc, OSError):
                raise self._away(ref, exc) from exc
            raise
        return ref

    def _away(self, ref: ArtifactRef, exc: OSError) -> StoreUnavailable:
        """A directory that cannot take the bytes (read-only, full, a file in its place):
        the store is away for writes, as a database that does not answer is, so the bytes
        of a paid answer wait in the artifact spool (``broker.artifact_spool``)."""
        return StoreUnavailable(f"{self.where} cannot take artifact {ref.id}: "
                                f"{exc.strerror or exc} ({exc.filename or self.root})",
                                service="artifact store", action="storing an artifact")

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

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]:
        artifact = _id_of(ref_or_id)
        try:
            handle = self.path(artifact).open("rb")
        except FileNotFoundError:
            raise ArtifactNotFound(f"artifact {artifact} is not in {self.root}",
                                   artifact=artifact) from None
        try:
            check_size(os.fstat(handle.fileno()).st_size, self.max_bytes, self.where)
        except ArtifactTooLarge:
            handle.close()
            raise

        def chunks() -> Iterator[bytes]:
            with handle:
                while chunk := handle.read(CHUNK_BYTES):
                    yield chunk
        return verified(artifact, chunks(), self.where)

    def exists(self, artifact: RefOrId) -> bool:
        return self.path(artifact).is_file()


class MemoryArtifactStore:
    """In-memory stand-in with the same contract (tests, dry runs)."""

    def __init__(self, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self.max_bytes = max_bytes
        self.where = "memory"

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        check_size(len(data), self.max_bytes, self.where)
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
        check_size(len(data), self.max_bytes, self.where)
        return b"".join(verified(artifact, [data], self.where))

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]:
        data = self.get(ref_or_id)
        return iter([data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)])

    def exists(self, artifact: RefOrId) -> bool:
        with self._lock:
            return _id_of(artifact) in self._data

    def path(self, artifact: RefOrId) -> None:
        return None

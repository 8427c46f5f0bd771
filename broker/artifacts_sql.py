"""Artifacts in the run store's database: what every host of a deployment can read.

Content-addressed rows (``artifacts``) with the bytes in ``artifact_chunks`` of
``CHUNK_BYTES`` each, so no value is larger than a chunk and a reader holds
one chunk at a time. A put writes the row and its chunks in one transaction
with ``INSERT ... ON CONFLICT DO NOTHING`` on the id: two hosts storing the
same bytes at once both succeed and the bytes are stored once.
The engine is passed in (the run store's); the schema is the run store's
(migration 0005), brought to head by ``SqlStore.open``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import Engine, Integer, LargeBinary, bindparam, literal, select, union_all
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from broker.artifacts import (
    CHUNK_BYTES,
    DEFAULT_MAX_BYTES,
    ArtifactNotFound,
    ArtifactRef,
    RefOrId,
    artifact_id,
    check_size,
    id_of,
    verified,
)
from broker.errors import StoreError, StoreUnavailable
from broker.models import artifact_chunks as chunks
from broker.models import artifacts
from broker.statements import upsert


class SqlArtifactStore:
    def __init__(self, engine: Engine, *, max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        self.engine = engine
        self.max_bytes = max_bytes
        backend = engine.url.get_backend_name()
        self.where = f"the {'PostgreSQL' if backend == 'postgresql' else backend} run store"

    def _failed(self, action: str, exc: SQLAlchemyError) -> Exception:
        if isinstance(exc, OperationalError | InterfaceError):
            return StoreUnavailable(f"{self.where} is unavailable while {action}: "
                                    f"{exc.orig or exc}; check REVISE_DATABASE_URL and that the "
                                    "database answers", action=action)
        return StoreError(f"{self.where} failed while {action}: {exc}", action=action)

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        check_size(len(data), self.max_bytes, self.where)
        ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
        parts = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        values = {"id": ref.id, "media_type": media_type, "size": len(data),
                  "chunks": len(parts), "created_at": datetime.now(UTC)}
        try:
            if self.engine.dialect.name == "postgresql":
                # One statement, so no BEGIN and COMMIT around it: a paid call's image is
                # stored on every call's path.
                with self.engine.connect().execution_options(
                        isolation_level="AUTOCOMMIT") as conn:
                    conn.execute(_put_in_one_statement(len(parts)), values | {
                        f"chunk_{number}": part for number, part in enumerate(parts)})
                return ref
            with self.engine.begin() as conn:
                added = conn.execute(upsert(conn, artifacts).values(**values)
                                     .on_conflict_do_nothing(index_elements=["id"])
                                     .returning(artifacts.c.id)).first()
                if added is not None:  # the first writer stores the bytes, in the same commit
                    for number, part in enumerate(parts):
                        conn.execute(chunks.insert().values(artifact_id=ref.id, number=number,
                                                            data=part))
        except SQLAlchemyError as exc:
            raise self._failed(f"storing artifact {ref.id}", exc) from exc
        return ref

    def _row(self, artifact: str) -> Any:
        try:
            with self.engine.connect() as conn:
                row = conn.execute(select(artifacts).where(artifacts.c.id == artifact)).first()
        except SQLAlchemyError as exc:
            raise self._failed(f"reading artifact {artifact}", exc) from exc
        if row is None:
            raise ArtifactNotFound(f"artifact {artifact} is not in {self.where}",
                                   artifact=artifact)
        return row

    def media_type(self, ref_or_id: RefOrId) -> str:
        return str(self._row(id_of(ref_or_id)).media_type)

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]:
        artifact = id_of(ref_or_id)
        row = self._row(artifact)
        check_size(int(row.size), self.max_bytes, self.where)

        def parts() -> Iterator[bytes]:
            for number in range(row.chunks):  # one chunk in memory at a time
                try:
                    with self.engine.connect() as conn:
                        part = conn.execute(select(chunks.c.data).where(
                            chunks.c.artifact_id == artifact,
                            chunks.c.number == number)).scalar()
                except SQLAlchemyError as exc:
                    raise self._failed(f"reading artifact {artifact}", exc) from exc
                yield bytes(part or b"")
        return verified(artifact, parts(), self.where)

    def get(self, ref_or_id: RefOrId) -> bytes:
        return b"".join(self.stream(ref_or_id))

    def exists(self, artifact: RefOrId) -> bool:
        try:
            self._row(id_of(artifact))
        except ArtifactNotFound:
            return False
        return True

    def path(self, artifact: RefOrId) -> None:
        return None


@lru_cache(maxsize=16)
def _put_in_one_statement(count: int) -> Any:
    """PostgreSQL: the row, and its ``count`` chunks (parameters ``chunk_0`` ...) only if
    this statement added it (a writer that finds the row stored by another adds nothing),
    as one statement. Built once per chunk count: building it cost more than running it."""
    added = (postgresql.insert(artifacts).values({c.name: bindparam(c.name) for c in artifacts.c})
             .on_conflict_do_nothing(index_elements=["id"])
             .returning(artifacts.c.id).cte("added"))
    rows = union_all(*(select(added.c.id, literal(number, Integer),
                              bindparam(f"chunk_{number}", type_=LargeBinary))
                       for number in range(count)))
    return chunks.insert().from_select(["artifact_id", "number", "data"], rows)

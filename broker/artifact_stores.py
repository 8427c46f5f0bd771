"""The artifact store the settings name (``REVISE_ARTIFACT_STORE``).

``file`` keeps bytes under ``HOME`` (one host); ``database`` in the run
store's database (the default when it is PostgreSQL, so every host of a
deployment reads what any broker worker wrote); ``s3`` in S3-compatible
object storage. Broker workers, embedded mode and ``revise artifact get``
all open their store here, so they agree on where an artifact is.
"""

from __future__ import annotations

import importlib.util

from sqlalchemy import Engine

from broker.artifacts import ArtifactStore, FileArtifactStore
from broker.errors import InputError
from broker.settings import ArtifactStoreKind, Settings

_NO_BUCKET = ("REVISE_ARTIFACT_STORE=s3 needs a bucket: set REVISE_S3_BUCKET (and "
              "REVISE_S3_ENDPOINT_URL for a non-AWS endpoint), or choose "
              "REVISE_ARTIFACT_STORE=file|database")


def artifact_store_problem(settings: Settings) -> str | None:
    """What opening the store the settings name would refuse, seen without connecting
    (``revise config --check``): an S3 store without its bucket or without boto3."""
    if settings.resolved_artifact_store is not ArtifactStoreKind.S3:
        return None
    if not settings.s3_bucket:
        return _NO_BUCKET
    if importlib.util.find_spec("boto3") is None:
        return ("REVISE_ARTIFACT_STORE=s3 needs boto3, which the base install leaves out: "
                "pip install -e '.[s3]'")
    return None


def open_artifact_store(settings: Settings, engine: Engine | None = None) -> ArtifactStore:
    """``engine`` is the run store's (needed for ``database``). Every store can be away
    (a database or S3 that does not answer, a file store's directory that is read-only,
    full or not a directory), so each is wrapped: a paid result's bytes wait in the spool
    meanwhile (``broker.artifact_spool``)."""
    store = _open(settings, engine)
    from broker.artifact_spool import SpoolingArtifactStore

    return SpoolingArtifactStore(store, settings.spool_dir / "artifacts")


def _open(settings: Settings, engine: Engine | None) -> ArtifactStore:
    kind = settings.resolved_artifact_store
    limit = settings.artifact_max_bytes
    if kind is ArtifactStoreKind.FILE:
        return FileArtifactStore(settings.artifacts_dir, max_bytes=limit)
    if kind is ArtifactStoreKind.DATABASE:
        from broker.artifacts_sql import SqlArtifactStore

        if engine is None:
            raise InputError("REVISE_ARTIFACT_STORE=database needs the run store open")
        return SqlArtifactStore(engine, max_bytes=limit)
    from broker.artifacts_s3 import S3ArtifactStore, client_from_settings

    if not settings.s3_bucket:
        raise InputError(_NO_BUCKET)
    return S3ArtifactStore(client_from_settings(settings), settings.s3_bucket,
                           prefix=settings.s3_prefix, max_bytes=limit)

"""Artifacts in S3-compatible object storage (AWS S3, MinIO, Ceph, ...) through boto3.

One object per content id at ``<prefix>sha256/<ab>/<hex>``, its media type as
the object's Content-Type. A put first asks whether the object exists (the
same id means the same bytes); a get streams the body in chunks and checks
the hash at the end. The client is passed in (``client_from_settings`` builds
one from ``REVISE_S3_*``); the bucket must exist: Revise never creates one.
The test suite runs this store against moto's S3 server on 127.0.0.1.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

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
from broker.errors import ConfigError, InputError, StoreUnavailable
from broker.settings import Settings

_MISSING = {"404", "NoSuchKey", "NotFound"}


def client_from_settings(settings: Settings) -> Any:
    try:
        import boto3
        from botocore.config import Config
    except ImportError:
        raise ConfigError("REVISE_ARTIFACT_STORE=s3 needs boto3, which the base install "
                          "leaves out: pip install 'revise[s3]' (in a checkout: pip install "
                          "-e '.[s3]')") from None

    secret = settings.s3_secret_access_key
    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region,
        aws_access_key_id=settings.s3_access_key_id,
        aws_secret_access_key=secret.get_secret_value() if secret else None,
        config=Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3},
                      s3={"addressing_style": "path"}))


class S3ArtifactStore:
    def __init__(self, client: Any, bucket: str, *, prefix: str = "",
                 max_bytes: int | None = DEFAULT_MAX_BYTES) -> None:
        if not bucket:
            raise InputError("the S3 artifact store needs a bucket; set REVISE_S3_BUCKET")
        self.client = client
        self.bucket = bucket
        self.prefix = prefix
        self.max_bytes = max_bytes
        self.where = f"s3://{bucket}/{prefix}"

    def key(self, ref_or_id: RefOrId) -> str:
        hex_ = id_of(ref_or_id).split(":", 1)[1]
        return f"{self.prefix}sha256/{hex_[:2]}/{hex_}"

    def _failed(self, action: str, exc: Exception) -> Exception:
        from botocore.exceptions import ClientError

        if isinstance(exc, ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code == "NoSuchBucket":
                return ConfigError(f"the bucket {self.bucket!r} does not exist at the S3 "
                                   "endpoint; create it or set REVISE_S3_BUCKET to one that "
                                   "does", setting="REVISE_S3_BUCKET")
            if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
                return ConfigError(f"the S3 endpoint refused {action} ({code}); check "
                                   "REVISE_S3_ACCESS_KEY_ID / REVISE_S3_SECRET_ACCESS_KEY",
                                   setting="REVISE_S3_ACCESS_KEY_ID")
        return StoreUnavailable(f"the object store {self.where} failed while {action}: {exc}; "
                                "check REVISE_S3_ENDPOINT_URL and that the endpoint answers",
                                action=action)

    def _head(self, artifact: str) -> dict[str, Any] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=self.key(artifact)))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING:
                return None
            raise self._failed(f"looking up artifact {artifact}", exc) from exc
        except BotoCoreError as exc:
            raise self._failed(f"looking up artifact {artifact}", exc) from exc

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        from botocore.exceptions import BotoCoreError, ClientError

        check_size(len(data), self.max_bytes, self.where)
        ref = ArtifactRef(id=artifact_id(data), media_type=media_type, size=len(data))
        if self._head(ref.id) is not None:
            return ref  # content-addressed: the same id means the same bytes
        try:  # upload_fileobj switches to a multipart upload for large bodies
            self.client.upload_fileobj(io.BytesIO(data), self.bucket, self.key(ref.id),
                                       ExtraArgs={"ContentType": media_type})
        except (BotoCoreError, ClientError) as exc:
            raise self._failed(f"storing artifact {ref.id}", exc) from exc
        return ref

    def stream(self, ref_or_id: RefOrId) -> Iterator[bytes]:
        from botocore.exceptions import BotoCoreError, ClientError

        artifact = id_of(ref_or_id)
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self.key(artifact))
        except ClientError as exc:
            if str(exc.response.get("Error", {}).get("Code", "")) in _MISSING:
                raise ArtifactNotFound(f"artifact {artifact} is not in {self.where}",
                                       artifact=artifact) from None
            raise self._failed(f"reading artifact {artifact}", exc) from exc
        except BotoCoreError as exc:
            raise self._failed(f"reading artifact {artifact}", exc) from exc
        check_size(int(answer.get("ContentLength") or 0), self.max_bytes, self.where)

        def body() -> Iterator[bytes]:
            try:
                yield from answer["Body"].iter_chunks(CHUNK_BYTES)
            except (BotoCoreError, ClientError) as exc:
                raise self._failed(f"reading artifact {artifact}", exc) from exc
        return verified(artifact, body(), self.where)

    def get(self, ref_or_id: RefOrId) -> bytes:
        return b"".join(self.stream(ref_or_id))

    def media_type(self, ref_or_id: RefOrId) -> str:
        head = self._head(id_of(ref_or_id))
        if head is None:
            raise ArtifactNotFound(f"artifact {id_of(ref_or_id)} is not in {self.where}")
        return str(head.get("ContentType") or "application/octet-stream")

    def exists(self, artifact: RefOrId) -> bool:
        return self._head(id_of(artifact)) is not None

    def path(self, artifact: RefOrId) -> None:
        return None

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.artifact_spool import SpoolingArtifactStore
from broker.artifact_stores import open_artifact_store
from broker.artifacts import (
    CHUNK_BYTES,
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactRef,
    ArtifactStore,
    ArtifactTooLarge,
    FileArtifactStore,
    MemoryArtifactStore,
    artifact_id,
)
from broker.artifacts_sql import SqlArtifactStore, chunks
from broker.errors import InputError
from broker.identity import sha256_hex
from broker.settings import Settings
from broker.sqlstore import SqlStore

LIMIT = 3 * CHUNK_BYTES + 17  # several chunks, and a limit to refuse


@pytest.fixture(params=["file", "memory", "sqlite", "postgres", "s3"])
def store(request, tmp_path) -> Iterator[ArtifactStore]:
    """One contract over every store: file and memory, the run store's database
    (SQLite, PostgreSQL) and S3 (moto's server on 127.0.0.1)."""
    if request.param == "file":
        yield FileArtifactStore(tmp_path / "artifacts", max_bytes=LIMIT)
    elif request.param == "memory":
        yield MemoryArtifactStore(max_bytes=LIMIT)
    elif request.param == "s3":
        env = request.getfixturevalue("s3_env")
        settings = Settings(artifact_store="s3", **{k.removeprefix("REVISE_").lower(): v
                                                   for k, v in env.items()},
                            artifact_max_bytes=LIMIT)
        yield _behind_the_spool(open_artifact_store(settings))
    else:
        run_store = SqlStore.open(request.getfixturevalue(f"{request.param}_url"))
        settings = Settings(artifact_store="database", artifact_max_bytes=LIMIT)
        yield _behind_the_spool(open_artifact_store(settings, run_store.engine))
        run_store.close()


def _behind_the_spool(opened: ArtifactStore) -> ArtifactStore:
    """A store that can be away comes wrapped in its outage spool (tested on its own in
    test_artifact_spool.py); the contract is the store's."""
    assert isinstance(opened, SpoolingArtifactStore)
    return opened.inner


def _tamper(store, ref) -> None:
    """Change the stored bytes behind the store's back."""
    if isinstance(store, FileArtifactStore):
        store.path(ref.id).write_bytes(b"tampered")
    elif isinstance(store, MemoryArtifactStore):
        store._data[ref.id] = b"tampered"
    elif isinstance(store, SqlArtifactStore):
        with store.engine.begin() as conn:
            conn.execute(chunks.update().where(chunks.c.artifact_id == ref.id,
                                               chunks.c.number == 0).values(data=b"tampered"))
    else:
        store.client.put_object(Bucket=store.bucket, Key=store.key(ref.id), Body=b"tampered")


def test_round_trip_by_ref_id_and_json(store):
    ref = store.put(b"hello", "text/plain")
    assert ref.id == f"sha256:{sha256_hex(b'hello')}"
    assert ref.size == 5 and ref.media_type == "text/plain"
    assert store.get(ref) == b"hello"
    assert store.get(ref.id) == b"hello"
    assert store.get(ref.uri) == b"hello"
    assert store.get(ref.to_json()) == b"hello"
    assert store.exists(ref.id)


def test_put_is_idempotent(store):
    first = store.put(b"same bytes", "application/octet-stream")
    second = store.put(b"same bytes", "application/octet-stream")
    assert first == second
    assert store.get(first) == b"same bytes"


def test_missing_artifact_raises_typed_error(store):
    missing = artifact_id(b"never stored")
    assert not store.exists(missing)
    with pytest.raises(ArtifactNotFound, match="sha256:"):
        store.get(missing)


def test_large_artifacts_stream_in_chunks_and_round_trip(store):
    data = bytes(range(256)) * (LIMIT // 256) + b"tail"[: LIMIT % 256]
    assert len(data) <= LIMIT
    ref = store.put(data, "application/octet-stream")
    parts = list(store.stream(ref))
    assert all(len(p) <= CHUNK_BYTES for p in parts) and len(parts) >= 3
    assert b"".join(parts) == data == store.get(ref.uri)


def test_the_size_limit_refuses_and_names_the_setting(store):
    with pytest.raises(ArtifactTooLarge, match="REVISE_ARTIFACT_MAX_BYTES"):
        store.put(b"x" * (LIMIT + 1), "application/octet-stream")
    assert not store.exists(artifact_id(b"x" * (LIMIT + 1)))


def test_a_store_with_a_lower_limit_does_not_hand_out_a_larger_artifact(store):
    ref = store.put(b"y" * 100, "application/octet-stream")
    store.max_bytes = 99  # the limit was lowered after the artifact was stored
    with pytest.raises(ArtifactTooLarge, match="over the limit of 99 bytes"):
        b"".join(store.stream(ref))


def test_damaged_bytes_are_refused_on_read(store):
    ref = store.put(b"original bytes", "text/plain")
    _tamper(store, ref)
    with pytest.raises(ArtifactCorrupt, match="does not match its hash"):
        store.get(ref)
    with pytest.raises(ArtifactCorrupt):
        b"".join(store.stream(ref))


def test_concurrent_puts_of_the_same_bytes_store_them_once(store):
    data = b"q" * (CHUNK_BYTES + 5)
    refs, errors = [], []

    def put():
        try:
            refs.append(store.put(data, "application/octet-stream"))
        except Exception as exc:  # collected, the assertion below names it
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(set(refs)) == 1
    assert store.get(refs[0]) == data


def test_every_store_names_itself(store):
    assert isinstance(store, ArtifactStore)
    assert store.where


def test_ref_json_shape_and_round_trip():
    ref = ArtifactRef(id=artifact_id(b"x"), media_type="image/png", size=1)
    data = ref.to_json()
    assert data == {"id": ref.id, "media_type": "image/png", "bytes": 1,
                    "uri": f"artifact://{ref.id}"}
    assert ArtifactRef.from_json(data) == ref


@pytest.mark.parametrize("bad", ["sha256:xyz", "md5:abc", "", "sha256:" + "A" * 64])
def test_bad_ids_are_rejected(bad):
    with pytest.raises(InputError):
        ArtifactRef(id=bad, media_type="image/png", size=1)
    with pytest.raises(InputError):
        MemoryArtifactStore().get(bad)


def test_from_json_rejects_incomplete_objects():
    with pytest.raises(InputError, match="media_type"):
        ArtifactRef.from_json({"id": artifact_id(b"x")})


def test_file_store_layout_is_content_addressed_with_fanout(tmp_path):
    store = FileArtifactStore(tmp_path)
    ref = store.put(b"payload", "text/plain")
    hex_ = ref.id.split(":")[1]
    assert store.path(ref.id) == tmp_path / hex_[:2] / hex_[2:4] / hex_
    assert store.path(ref.id).read_bytes() == b"payload"
    assert not [p for p in tmp_path.rglob(".tmp-*")], "no temp files left behind"


def test_file_store_verifies_hash_on_get(tmp_path):
    store = FileArtifactStore(tmp_path)
    ref = store.put(b"original", "text/plain")
    store.path(ref.id).write_bytes(b"tampered")
    with pytest.raises(ArtifactCorrupt, match="does not match its hash"):
        store.get(ref)


def test_file_store_concurrent_puts_of_same_content(tmp_path):
    store = FileArtifactStore(tmp_path)
    data = b"z" * 100_000
    refs = []

    def put():
        refs.append(store.put(data, "application/octet-stream"))

    threads = [threading.Thread(target=put) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(refs)) == 1
    assert store.get(refs[0]) == data


def test_memory_store_has_no_path():
    store = MemoryArtifactStore()
    ref = store.put(b"a", "text/plain")
    assert store.path(ref.id) is None
    assert isinstance(store, ArtifactStore)
    assert isinstance(FileArtifactStore(Path("unused")), ArtifactStore)

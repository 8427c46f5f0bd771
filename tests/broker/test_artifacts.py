import threading
from pathlib import Path

import pytest

from broker.artifacts import (
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactRef,
    ArtifactStore,
    FileArtifactStore,
    MemoryArtifactStore,
    artifact_id,
)
from broker.errors import InputError
from broker.identity import sha256_hex


@pytest.fixture(params=["file", "memory"])
def store(request, tmp_path) -> ArtifactStore:
    if request.param == "file":
        return FileArtifactStore(tmp_path / "artifacts")
    return MemoryArtifactStore()


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

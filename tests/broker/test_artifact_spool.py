"""Artifact bytes a paid call produced while the artifact store was away wait on local disk
(fsynced, content-addressed) and reach the store when it answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.artifact_spool import SpoolingArtifactStore
from broker.artifacts import ArtifactRef, MemoryArtifactStore, artifact_id
from broker.errors import StoreUnavailable


class OutageStore(MemoryArtifactStore):
    """An in-memory store that answers StoreUnavailable while ``away`` (an outage)."""

    away = False

    def put(self, data: bytes, media_type: str) -> ArtifactRef:
        if self.away:
            raise StoreUnavailable("the artifact store does not answer")
        return super().put(data, media_type)


@pytest.fixture
def inner() -> OutageStore:
    return OutageStore()


def test_bytes_wait_on_disk_and_reach_the_store_when_it_answers(inner: OutageStore,
                                                                 tmp_path: Path) -> None:
    store = SpoolingArtifactStore(inner, tmp_path / "spool")
    inner.away = True
    ref = store.put(b"\x89PNG paid picture", "image/png")
    picture = b"\x89PNG paid picture"
    assert ref == ArtifactRef(artifact_id(picture), "image/png", len(picture))
    assert len(store.pending()) == 1 and not inner.exists(ref.id)
    assert store.get(ref.id) == b"\x89PNG paid picture"  # readable meanwhile
    assert store.drain() == 0 and len(store.pending()) == 1  # still away: kept
    inner.away = False
    assert store.drain() == 1 and store.pending() == []
    assert inner.get(ref.id) == b"\x89PNG paid picture"


def test_a_store_that_answers_keeps_nothing_on_disk(inner: OutageStore, tmp_path: Path) -> None:
    store = SpoolingArtifactStore(inner, tmp_path / "spool")
    ref = store.put(b"ok", "image/png")
    assert inner.get(ref.id) == b"ok" and store.pending() == []

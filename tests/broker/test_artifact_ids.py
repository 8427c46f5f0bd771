"""Artifact ids become file names: only a whole ``sha256:<64 hex>`` is ever a path."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.artifacts import ArtifactRef, FileArtifactStore, MemoryArtifactStore
from broker.errors import InputError

HEX = "ab" * 32

BAD_IDS = {
    "trailing newline": f"sha256:{HEX}\n",
    "uri trailing newline": f"artifact://sha256:{HEX}\n",
    "parent escape": "../../etc/passwd",
    "hex then path": f"sha256:{HEX}/../../x",
    "path in the hex": "sha256:../" + HEX[3:],
    "uppercase hex": f"sha256:{HEX.upper()}",
    "short": "sha256:abc",
    "other algorithm": f"md5:{HEX}",
    "empty": "",
    "nul": f"sha256:{HEX[:-1]}\x00",
    "leading space": f" sha256:{HEX}",
}


@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_file_store_refuses_ids_that_are_not_exactly_a_digest(tmp_path: Path, bad: str) -> None:
    store = FileArtifactStore(tmp_path / "artifacts")
    for use in (store.path, store.get, store.exists):
        with pytest.raises(InputError, match="is not an artifact id"):
            use(bad)
    with pytest.raises(InputError, match="is not an artifact id"):
        MemoryArtifactStore().get(bad)


@pytest.mark.parametrize("bad", list(BAD_IDS.values()), ids=list(BAD_IDS))
def test_refs_and_their_json_refuse_bad_ids(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InputError, match="is not an artifact id"):
        ArtifactRef(id=bad, media_type="image/png", size=1)
    with pytest.raises(InputError, match="is not an artifact id"):
        FileArtifactStore(tmp_path).get({"id": bad, "media_type": "image/png", "bytes": 1})


def test_non_string_ids_are_a_clear_error(tmp_path: Path) -> None:
    for bad in (None, 42, b"sha256:" + HEX.encode()):
        with pytest.raises(InputError, match="is not an artifact id"):
            FileArtifactStore(tmp_path).path(bad)  # type: ignore[arg-type]


def test_a_valid_id_maps_to_a_file_inside_the_root(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    store = FileArtifactStore(root)
    ref = store.put(b"pixels", "image/png")
    path = store.path(ref.id)
    assert path.resolve().is_relative_to(root.resolve())
    assert path.name == ref.id.removeprefix("sha256:")
    assert store.path(ref.uri) == path


def test_the_message_shows_a_long_bad_id_truncated(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        FileArtifactStore(tmp_path).path("x" * 5000)
    assert len(caught.value.message) < 300 and "5002 characters" in caught.value.message

"""Image pinning and verification against an in-memory engine stand-in."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from broker.errors import SandboxUnavailable
from broker.settings import Settings
from sandbox import image as image_mod
from sandbox.image import (
    LABEL_BASE,
    LABEL_SHA,
    OFFLINE,
    ensure_image,
    pin_path,
    runtime_sha256,
    verify_image,
    wanted_base,
)


@dataclass
class FakeImage:
    id: str
    labels: dict[str, str]


@dataclass
class FakeImages:
    by_tag: dict[str, FakeImage] = field(default_factory=dict)

    def get(self, tag: str) -> FakeImage:
        from docker.errors import ImageNotFound as DockerImageNotFound

        if tag not in self.by_tag:
            raise DockerImageNotFound(tag)
        return self.by_tag[tag]


@dataclass
class FakeClient:
    images: FakeImages = field(default_factory=FakeImages)


@pytest.fixture
def settings(tmp_path, monkeypatch) -> Settings:
    monkeypatch.delenv("REVISE_SANDBOX_BASE_IMAGE", raising=False)
    monkeypatch.delenv("BASE_IMAGE", raising=False)
    return Settings(home=tmp_path / "home", sandbox_pin=tmp_path / "pin" / "sandbox-image.json")


def _current_image(image_id: str = "sha256:" + "a" * 64) -> FakeImage:
    return FakeImage(image_id, {LABEL_SHA: runtime_sha256(), LABEL_BASE: "revise-base:bookworm"})


def _pin(settings: Settings, image_id: str) -> None:
    pin_path(settings).parent.mkdir(parents=True, exist_ok=True)
    pin_path(settings).write_text(json.dumps({"image_id": image_id}))


def test_base_defaults_to_offline_and_env_overrides(settings, monkeypatch):
    assert wanted_base(settings) == OFFLINE
    monkeypatch.setenv("BASE_IMAGE", "python:3.11-slim")
    assert wanted_base(settings) == "python:3.11-slim"
    monkeypatch.setenv("REVISE_SANDBOX_BASE_IMAGE", "registry.local/py:3.11")
    assert wanted_base(settings) == "registry.local/py:3.11"
    assert wanted_base(settings, "offline") == OFFLINE


@pytest.mark.parametrize("changed", ["runtime.py", "language.py"])
def test_runtime_hash_covers_dockerfile_and_runtime_files(tmp_path, monkeypatch, changed):
    before = runtime_sha256()
    assert [path.name for path in image_mod.runtime_files()] == ["runtime.py", "language.py"]
    for path in image_mod.runtime_files():
        extra = b"\n# changed\n" if path.name == changed else b""
        (tmp_path / path.name).write_bytes(path.read_bytes() + extra)
    monkeypatch.setattr(image_mod, "RUNTIME", tmp_path / "runtime.py")
    assert runtime_sha256() != before


def test_verify_refuses_without_a_pin(settings):
    client = FakeClient(FakeImages({settings.sandbox_image: _current_image()}))
    with pytest.raises(SandboxUnavailable, match="revise sandbox build"):
        verify_image(client, settings)


def test_verify_refuses_a_missing_image(settings):
    _pin(settings, "sha256:" + "a" * 64)
    with pytest.raises(SandboxUnavailable, match="missing"):
        verify_image(FakeClient(), settings)


def test_verify_refuses_a_swapped_image(settings):
    _pin(settings, "sha256:" + "b" * 64)
    client = FakeClient(FakeImages({settings.sandbox_image: _current_image()}))
    with pytest.raises(SandboxUnavailable, match="is pinned"):
        verify_image(client, settings)


def test_verify_refuses_an_image_of_another_runtime(settings):
    stale = FakeImage("sha256:" + "c" * 64, {LABEL_SHA: "0" * 64})
    _pin(settings, stale.id)
    client = FakeClient(FakeImages({settings.sandbox_image: stale}))
    with pytest.raises(SandboxUnavailable, match="another runtime"):
        verify_image(client, settings)


def test_verify_returns_the_pinned_id(settings):
    current = _current_image()
    _pin(settings, current.id)
    client = FakeClient(FakeImages({settings.sandbox_image: current}))
    assert verify_image(client, settings) == current.id


def test_ensure_reuses_a_current_image_and_pins_it(settings, monkeypatch):
    def no_build(*_args, **_kwargs):
        raise AssertionError("a current image must not be rebuilt")

    monkeypatch.setattr(image_mod, "_build", no_build)
    monkeypatch.setattr(image_mod, "build_offline_base", no_build)
    current = _current_image()
    client = FakeClient(FakeImages({settings.sandbox_image: current}))
    lines: list[str] = []
    info = ensure_image(settings, progress=lines.append, client=client)
    assert (info.image_id, info.built) == (current.id, False)
    assert json.loads(pin_path(settings).read_text())["image_id"] == current.id
    assert any("current" in line for line in lines)


def test_ensure_rebuilds_a_stale_image(settings, monkeypatch):
    built: list[tuple[str, str]] = []
    client = FakeClient(FakeImages({settings.sandbox_image: FakeImage("sha256:old", {})}))

    def fake_build(_client, tag, base, digest, progress):
        built.append((tag, base))
        client.images.by_tag[tag] = FakeImage("sha256:new", {LABEL_SHA: digest})
        return "sha256:new"

    monkeypatch.setattr(image_mod, "_build", fake_build)
    monkeypatch.setattr(image_mod, "_drop_old", lambda *_: None)
    info = ensure_image(settings, base="python:3.11-slim", client=client)
    assert built == [(settings.sandbox_image, "python:3.11-slim")]
    assert (info.image_id, info.built) == ("sha256:new", True)
    assert json.loads(pin_path(settings).read_text())["image_id"] == "sha256:new"

"""Build, pin and verify the sandbox image.

The image is our Dockerfile (``sandbox/image/Dockerfile``) on a Python 3.11
base. The base is either a public image (``REVISE_SANDBOX_BASE_IMAGE`` or
``BASE_IMAGE``, e.g. ``python:3.11-slim``, where a registry is reachable) or,
by default, the offline base that ``sandbox/image/build_base.sh`` makes with
debootstrap from the host's own apt mirror.

``ensure_image`` is idempotent: an image whose ``revise.runtime-sha256`` label
matches the current Dockerfile + runtime files (``sandbox.job.RUNTIME_FILES``:
runtime.py and language.py; and whose base is the wanted one)
is reused without a build. Its id is pinned in ``settings.sandbox_pin``
and ``verify_image`` refuses to run anything else.

``python -m sandbox.image [--base IMAGE|offline] [--force]`` builds with progress.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from broker.errors import SandboxError, SandboxUnavailable
from broker.settings import Settings
from sandbox.job import RUNTIME_FILES

Progress = Callable[[str], None]

SANDBOX_DIR = Path(__file__).parent
IMAGE_DIR = SANDBOX_DIR / "image"
DOCKERFILE = IMAGE_DIR / "Dockerfile"
BUILD_BASE = IMAGE_DIR / "build_base.sh"
RUNTIME = SANDBOX_DIR / "runtime.py"
OFFLINE = "offline"
LABEL_SHA = "revise.runtime-sha256"
LABEL_BASE = "revise.base-image"
_FIX = "run `revise sandbox build` (or `python -m sandbox.image`)"
_BUILD_TIMEOUT = 1800
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    image_id: str
    base_image: str = ""
    runtime_sha256: str = ""
    built: bool = False


def runtime_files() -> tuple[Path, ...]:
    """The files the image carries in /opt/revise (runtime.py and what it imports)."""
    return tuple(RUNTIME.with_name(name) for name in RUNTIME_FILES)


def runtime_sha256() -> str:
    """The content hash the image is labelled with: Dockerfile + the runtime files."""
    digest = hashlib.sha256()
    for path in (DOCKERFILE, *runtime_files()):
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def wanted_base(settings: Settings, base: str | None = None) -> str:
    """The base image to build on: explicit, then settings/env, else the offline base."""
    for candidate in (base, getattr(settings, "sandbox_base_image", None),
                      os.environ.get("REVISE_SANDBOX_BASE_IMAGE"), os.environ.get("BASE_IMAGE")):
        if candidate:
            return str(candidate)
    return OFFLINE


def pin_path(settings: Settings) -> Path:
    return Path(settings.sandbox_pin)


def read_pin(settings: Settings) -> dict[str, Any] | None:
    try:
        data = json.loads(pin_path(settings).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _write_pin(settings: Settings, info: ImageInfo) -> None:
    path = pin_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {**asdict(info), "pinned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    del record["built"]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@contextmanager
def _build_lock(settings: Settings) -> Iterator[None]:
    """Serialise builds from concurrent processes on this machine."""
    pin = pin_path(settings)
    pin.parent.mkdir(parents=True, exist_ok=True)
    with open(pin.with_suffix(".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _client(timeout: int = 60) -> Any:
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise SandboxUnavailable(
            f"no Docker engine answers ({exc}); start one with `bash sandbox/engine.sh`, "
            "or set REVISE_SANDBOX=process") from None
    return client


def build_offline_base(progress: Progress) -> str:
    """Run build_base.sh (debootstrap + docker import; a no-op when the base exists)."""
    proc = subprocess.Popen(["bash", str(BUILD_BASE)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        line = line.rstrip("\n")
        lines.append(line)
        progress(line)
    if proc.wait() != 0 or not lines:
        tail = "\n".join(lines[-15:])
        raise SandboxError(f"building the offline base image failed (build_base.sh exit "
                           f"{proc.returncode}):\n{tail}")
    return lines[-1].strip()


def _emit_build_chunk(chunk: dict[str, Any], progress: Progress) -> None:
    if "error" in chunk:
        detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
        raise SandboxError(f"sandbox image build failed: {detail.strip()}")
    text = chunk.get("stream")
    if text:
        for line in _ANSI.sub("", text).splitlines():
            if line.strip():
                progress(line.rstrip())
    elif "status" in chunk and "progressDetail" not in chunk:
        progress(f"{chunk.get('id', '')} {chunk['status']}".strip())


def _build(client: Any, tag: str, base: str, digest: str, progress: Progress) -> str:
    with tempfile.TemporaryDirectory(prefix="revise-image-") as context:
        # Exactly these files in the context: nothing else can end up in the image.
        shutil.copyfile(DOCKERFILE, Path(context) / "Dockerfile")
        for path in runtime_files():
            shutil.copyfile(path, Path(context) / path.name)
        stream = client.api.build(
            path=context, tag=tag, buildargs={"BASE_IMAGE": base}, pull=False, rm=True,
            forcerm=True, decode=True, labels={LABEL_SHA: digest, LABEL_BASE: base})
        for chunk in stream:
            _emit_build_chunk(chunk, progress)
    return str(client.images.get(tag).id)


def _current(client: Any, tag: str, digest: str, base: str) -> ImageInfo | None:
    """``tag`` when it is built from this Dockerfile, runtime and base, else None."""
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(tag)
    except ImageNotFound:
        return None
    labels = image.labels or {}
    if labels.get(LABEL_SHA) != digest:
        return None
    if base != OFFLINE and labels.get(LABEL_BASE) != base:
        return None
    if base == OFFLINE and not str(labels.get(LABEL_BASE, "")).startswith("revise-base:"):
        return None
    return ImageInfo(tag, str(image.id), str(labels.get(LABEL_BASE, "")), digest)


def _image_id(client: Any, tag: str) -> str | None:
    from docker.errors import ImageNotFound

    try:
        return str(client.images.get(tag).id)
    except ImageNotFound:
        return None


def _drop_old(client: Any, image_id: str) -> None:
    """Remove the image a rebuild replaced; it stays if a container still uses it."""
    from docker.errors import APIError

    try:
        client.images.remove(image_id)
    except APIError:
        pass


def ensure_image(settings: Settings, *, progress: Progress | None = None,
                 base: str | None = None, force: bool = False,
                 client: Any = None) -> ImageInfo:
    """Build the sandbox image unless a current one exists; pin and return its id."""
    say: Progress = progress or (lambda _line: None)
    client = client or _client(timeout=_BUILD_TIMEOUT)
    tag = settings.sandbox_image
    digest = runtime_sha256()
    wanted = wanted_base(settings, base)
    with _build_lock(settings):
        current = None if force else _current(client, tag, digest, wanted)
        if current is not None:
            info = current
            say(f"{tag} is current ({info.image_id[:19]})")
        else:
            started = time.monotonic()
            previous = _image_id(client, tag)
            base_ref = build_offline_base(say) if wanted == OFFLINE else wanted
            say(f"building {tag} on {base_ref}")
            try:
                image_id = _build(client, tag, base_ref, digest, say)
            except SandboxError as exc:
                if wanted == OFFLINE:
                    raise
                raise SandboxError(
                    f"{exc.message}; without a reachable registry build on the offline base "
                    f"(unset REVISE_SANDBOX_BASE_IMAGE/BASE_IMAGE, or --base {OFFLINE})") from None
            info = ImageInfo(tag, image_id, base_ref, digest, built=True)
            say(f"built {tag} = {image_id} in {time.monotonic() - started:.1f}s")
            if previous and previous != image_id:
                _drop_old(client, previous)
        if (read_pin(settings) or {}).get("image_id") != info.image_id:
            _write_pin(settings, info)
    return info


def verify_image(client: Any, settings: Settings) -> str:
    """The pinned image id, after checking the tag still points at it; else refuse."""
    from docker.errors import ImageNotFound

    pin = read_pin(settings)
    if not pin or not pin.get("image_id"):
        raise SandboxUnavailable(
            f"no sandbox image is pinned in {pin_path(settings)}; {_FIX}")
    tag = settings.sandbox_image
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        raise SandboxUnavailable(f"the sandbox image {tag} is missing; {_FIX}") from None
    if image.id != pin["image_id"]:
        raise SandboxUnavailable(
            f"the sandbox image {tag} is {image.id}, but {pin['image_id']} is pinned in "
            f"{pin_path(settings)}; refusing an image that was not built by Revise; {_FIX}")
    if (image.labels or {}).get(LABEL_SHA) != runtime_sha256():
        raise SandboxUnavailable(
            f"the sandbox image {tag} was built from another runtime, language table or "
            f"Dockerfile; {_FIX}")
    return str(image.id)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.image",
                                     description="Build (or confirm) the sandbox image.")
    parser.add_argument("--base", help=f"base image, or '{OFFLINE}' for the debootstrap base "
                        "(default: $REVISE_SANDBOX_BASE_IMAGE, $BASE_IMAGE, else offline)")
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    args = parser.parse_args(argv)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        info = ensure_image(Settings(), progress=progress, base=args.base, force=args.force)
    except (SandboxError, SandboxUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(asdict(info)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

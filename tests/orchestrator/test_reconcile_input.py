"""`revise reconcile R ID --result F` checks the result before it commits: the capability's
result shape, and artifacts that exist in the artifact store or are imported with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.artifacts import MemoryArtifactStore, artifact_id
from broker.errors import InputError
from broker.identity import Identity
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from orchestrator.reconcile_input import Imported, check_write_back
from sandbox.runner import ProcessRunner
from tests.rows import left_unresolved

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n" + b"operator's copy of the provider's image"


def _image(ident: str, size: int = len(PNG)) -> dict:
    return {"artifact": {"id": ident, "media_type": "image/png", "bytes": size},
            "width": 1024, "height": 1024}


def test_the_result_shape_is_the_capabilitys() -> None:
    store = MemoryArtifactStore()
    ref = store.put(PNG, "image/png")
    check_write_back("image.generate", _image(ref.id), store)
    with pytest.raises(InputError, match=r"not a image.generate result: width: Field required"):
        check_write_back("image.generate", {"artifact": _image(ref.id)["artifact"],
                                            "height": 3}, store)
    with pytest.raises(InputError, match=r"artifact\.id: String should match pattern"):
        check_write_back("image.generate", _image("sha256:nothex"), store)
    with pytest.raises(InputError, match="verdict: Input should be 'pass' or 'fail'"):
        check_write_back("review.visual", {"verdict": "maybe", "score": 1}, store)
    with pytest.raises(InputError, match=r"a text\.generate result is a JSON object, got list"):
        check_write_back("text.generate", ["hello"], store)
    check_write_back("text.generate", {"text": "hello", "extra": 1}, store)


def test_artifacts_must_exist_or_be_imported() -> None:
    store = MemoryArtifactStore()
    made_up = "sha256:" + "0" * 64
    with pytest.raises(InputError) as caught:
        check_write_back("image.generate", _image(made_up), store)
    assert f"result.artifact references artifact {made_up}, which is not in the artifact " \
           "store; import the provider's file with --artifact FILE" in caught.value.message
    real = artifact_id(PNG)
    with pytest.raises(InputError, match=r"says 12 bytes but shot\.png has"):
        check_write_back("image.generate", _image(real, 12), store, [Imported("shot.png", PNG)])
    with pytest.raises(InputError, match=r"other.png \(sha256:.*\) is not referenced"):
        check_write_back("image.generate", _image(real), store,
                         [Imported("shot.png", PNG), Imported("other.png", b"x")])
    assert not store.exists(real)  # nothing is stored when a check fails
    check_write_back("image.generate", _image(real), store, [Imported("shot.png", PNG)])
    assert store.get(real) == PNG
    uri = {"dry_run": True, "frames": [f"artifact://{made_up}"]}
    with pytest.raises(InputError, match=r"result.frames\[0\] references artifact"):
        check_write_back("video.generate", uri, store)


LOST = Identity("orchestrate/#0", (), 1)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A run whose attempt at orchestrate/#0@:1 a crash left unresolved."""
    from broker.envelope import Envelope

    settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    try:
        script = (ROOT / "tests" / "fixtures" / "scripts" / "payload_v1.py").read_text()
        services.pipeline().run("R", script, {}, Envelope())
        left_unresolved(services.store, "R", LOST, capability="image.generate",
                        digest="d" * 64, revision=1)
    finally:
        services.close()
    return settings.home


def _reconcile(home: Path, *argv: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, "-m", "workers.cli", "reconcile", "R",
                           str(LOST), *argv, "--operator", "ana", "--reason", "console",
                           "--json"], capture_output=True, text=True, cwd=home.parent,
                          env={**os.environ, "REVISE_HOME": str(home)}, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_cli_refuses_a_made_up_artifact_and_imports_a_real_one(home: Path,
                                                                   tmp_path: Path) -> None:
    result = tmp_path / "known.json"
    result.write_text(json.dumps(_image("sha256:" + "0" * 64)))
    code, out = _reconcile(home, "--result", str(result))
    assert code == 2 and "is not in the artifact store" in out["error"]["message"]
    result.write_text(json.dumps({"artifact": "x"}))
    code, out = _reconcile(home, "--result", str(result))
    assert code == 2 and "not a image.generate result" in out["error"]["message"]

    shot = tmp_path / "shot.png"
    shot.write_bytes(PNG)
    result.write_text(json.dumps(_image(artifact_id(PNG))))
    code, out = _reconcile(home, "--result", str(result), "--artifact", str(shot))
    assert code == 0 and out["decision"] == "resolved", out
    services = open_services(Settings(home=home))
    try:
        assert services.artifacts.get(artifact_id(PNG)) == PNG
        assert services.store.get_slot("R", LOST) is not None
    finally:
        services.close()


def test_a_deeply_nested_result_file_is_one_error_line(tmp_path: Path) -> None:
    """`--result` of a file nested 100,000 deep: one line naming the file, no traceback."""
    from orchestrator.cli_common import read_result

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match=r"result file .*deep\.json nests too deeply"):
        read_result(deep)

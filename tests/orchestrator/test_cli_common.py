"""Bad input before work (issue 29, item 3): every file a command reads is bounded before
it is read or parsed, and refused in one line naming the file, the limit and what to do
(the setting to raise where there is one); every hint fits its command."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.errors import InputError
from orchestrator.cli import app
from orchestrator.cli_common import MAX_RESULT_FILE_BYTES, read_bounded

SCRIPT = 'async def orchestrate(ctx, args):\n    return 1\n'


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that costs no disk (reading it would still take time)."""
    with path.open("wb") as handle:
        handle.truncate(size)
    return path


def _revise(tmp_path: Path, *argv: str, **env: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(app, list(argv), env={"REVISE_HOME": str(tmp_path / "home"),
                                                      "COLUMNS": "300", **env})
    return result.exit_code, result.stderr.strip().splitlines()


def test_a_script_over_the_checker_limit_is_named_before_it_is_read(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "big.py", 1 << 30)
    code, lines = _revise(tmp_path, "check", str(big))
    assert code == 2 and lines == [
        f"error: script file {big} is {1 << 30} bytes, over the limit of 262144 bytes; that "
        "is the checker's limit (rule R00, not a setting): move data into --args instead of "
        "literals"]


def test_an_envelope_over_its_limit_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    envelope = tmp_path / "env.yaml"
    envelope.write_text("grants: [" + ", ".join(["image.generate"] * 100_000) + "]\n")
    code, lines = _revise(tmp_path, "run", str(script), "--run-id", "r", "--envelope",
                          str(envelope))
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: envelope file {envelope} is over the limit of 262144 "
                               "bytes (not a setting")


@pytest.mark.parametrize(("content", "problem"), [
    ("{bad", "is not JSON (Expecting property name"),
    (b"\xff\xfe{}", "is not UTF-8 (byte 0)"),
    ('{"text": "half a pair \\ud800"}', "cannot be stored: a string contains a lone "
                                          "surrogate '\\ud800'"),
])
def test_a_result_that_is_not_json_gets_a_result_hint(tmp_path: Path, content: str | bytes,
                                                      problem: str) -> None:
    result = tmp_path / "known.json"
    if isinstance(content, bytes):
        result.write_bytes(content)
    else:
        result.write_text(content)
    code, lines = _revise(tmp_path, "reconcile", "r", "orchestrate/#0@:0", "--result",
                          str(result), "--operator", "ana", "--reason", "shown")
    assert code == 2 and len(lines) == 1
    assert lines[0].startswith(f"error: result file {result} {problem}")
    assert "shots" not in lines[0], "an args example is no fix for a result"
    if "JSON" in problem:
        assert "in its capability's result shape" in lines[0]


def test_result_and_artifact_files_are_bounded(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "known.json", MAX_RESULT_FILE_BYTES + 1)
    code, lines = _revise(tmp_path, "reconcile", "r", "orchestrate/#0@:0", "--result",
                          str(big), "--operator", "ana", "--reason", "shown")
    assert code == 2 and lines == [
        f"error: result file {big} is {MAX_RESULT_FILE_BYTES + 1} bytes, over the limit of "
        f"{MAX_RESULT_FILE_BYTES} bytes; a result names its artifacts (--artifact FILE), it "
        "does not hold them"]
    known = tmp_path / "small.json"
    known.write_text("{}")
    shot = _sparse(tmp_path / "shot.png", 4096)
    code, lines = _revise(tmp_path, "reconcile", "r", "orchestrate/#0@:0", "--result",
                          str(known), "--artifact", str(shot), "--operator", "ana",
                          "--reason", "shown", REVISE_ARTIFACT_MAX_BYTES="1024")
    assert code == 2 and lines == [
        f"error: artifact file {shot} is 4096 bytes, over the limit of 1024 bytes; raise "
        "REVISE_ARTIFACT_MAX_BYTES (every process of the deployment must see the same "
        "value) to import it"]


def test_a_pipe_is_bounded_by_reading_one_byte_past_the_limit(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.fork()
    if writer == 0:  # the child fills the pipe and leaves
        try:
            with open(fifo, "wb") as handle:
                handle.write(b"x" * 5000)
        finally:
            os._exit(0)
    try:
        with pytest.raises(InputError, match="is more than 4096 bytes, over the limit"):
            read_bounded(fifo, "result", 4096, "make it smaller")
    finally:
        os.waitpid(writer, 0)

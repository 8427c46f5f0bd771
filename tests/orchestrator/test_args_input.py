"""Bad args files are refused before any work, as the user meets them: `revise run` and
`revise submit` in a subprocess, one `error:` line naming the file and the fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestrator.inputs import MAX_ARGS_DEPTH, ArgsFile

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "scripts" / "e3_v2.py"
REDIS_DB = os.environ.get("REVISE_TEST_REDIS_DB", "15")


def _revise(tmp_path: Path, *argv: str, code: int = 2) -> str:
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_SANDBOX": "process",
           "REVISE_REDIS_URL": f"redis://127.0.0.1:6379/{REDIS_DB}", "COLUMNS": "400"}
    done = subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == code, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stderr


def _one_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize("command", ["run", "submit"])
@pytest.mark.parametrize(("content", "kind"), [
    ("[1, 2]", "array"), ('"shots"', "string"), ("3", "number"), ("null", "null")])
def test_args_that_are_not_an_object_are_refused(tmp_path: Path, command: str, content: str,
                                                 kind: str) -> None:
    args = tmp_path / "args.json"
    args.write_text(content)
    line = _one_error(_revise(tmp_path, command, str(SCRIPT), "--run-id", "A", "--args",
                              str(args)))
    assert line.startswith(f"error: args file {args} holds a JSON {kind}; args must be a "
                           'JSON object like {"shots": ["a", "b"]}'), line


@pytest.mark.parametrize("command", ["run", "submit"])
def test_the_size_limit_is_checked_before_parsing_and_names_the_field(tmp_path: Path,
                                                                      command: str) -> None:
    args = tmp_path / "big.json"
    # 64 MB that is not even JSON: parsing would say so (slowly); the size check comes first.
    with args.open("wb") as handle:
        handle.truncate(64 << 20)
    started = time.monotonic()
    line = _one_error(_revise(tmp_path, command, str(SCRIPT), "--run-id", "B", "--args",
                              str(args)))
    assert time.monotonic() - started < 30
    assert line.startswith(f"error: args file {args} is {64 << 20} bytes, over the "
                           "envelope's limit of 1048576 bytes (sandbox.args_bytes;"), line
    assert "raise sandbox.args_bytes in the envelope given to --envelope" in line


def test_the_limit_is_the_envelope_the_revision_uses(tmp_path: Path) -> None:
    """A larger limit in --envelope admits the file; a later revision without --envelope
    reuses the stored envelope, whose limit then bounds the new args file."""
    envelope = tmp_path / "env.json"
    envelope.write_text(json.dumps({"sandbox": {"args_bytes": 1024}}))
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"shots": ["a"]}))
    _revise(tmp_path, "run", str(SCRIPT), "--run-id", "C", "--args", str(small),
            "--envelope", str(envelope), "--json", code=0)
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"shots": ["x" * 2000]}))
    stderr = _revise(tmp_path, "run", str(SCRIPT), "--run-id", "C", "--args", str(big))
    size = len(big.read_bytes())
    assert f"error: args file {big} is {size} bytes, over the envelope's limit of 1024 " \
        "bytes" in stderr, stderr
    envelope.write_text(json.dumps({"sandbox": {"args_bytes": 4096}}))
    _revise(tmp_path, "run", str(SCRIPT), "--run-id", "C", "--args", str(big),
            "--envelope", str(envelope), "--json", code=0)


@pytest.mark.parametrize("depth", [MAX_ARGS_DEPTH + 1, 100_000])
def test_deeply_nested_args_are_one_line_never_a_recursion_error(tmp_path: Path,
                                                                 depth: int) -> None:
    args = tmp_path / "deep.json"
    args.write_text('{"a": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}")
    line = _one_error(_revise(tmp_path, "run", str(SCRIPT), "--run-id", "D", "--args",
                              str(args)))
    assert line.startswith(f"error: args file {args} nests "), line
    assert "args must be a JSON object like" in line


@pytest.mark.parametrize("command", ["run", "submit"])
def test_args_with_half_a_surrogate_pair_are_one_line(tmp_path: Path, command: str) -> None:
    args = tmp_path / "args.json"
    args.write_text('{"shots": ["caf\\ud800"]}')  # JSON allows it; no UTF-8 text holds it
    line = _one_error(_revise(tmp_path, command, str(SCRIPT), "--run-id", "U", "--args",
                              str(args)))
    assert line.startswith(f"error: args file {args} cannot be stored: a string contains a "
                           "lone surrogate '\\ud800'"), line


def test_nesting_at_the_limit_is_accepted(tmp_path: Path) -> None:
    args = tmp_path / "deep.json"
    args.write_text('{"a": ' + "[" * (MAX_ARGS_DEPTH - 1) + "]" * (MAX_ARGS_DEPTH - 1) + "}")
    value = ArgsFile(args).load(1 << 20)["a"]
    for _ in range(MAX_ARGS_DEPTH - 2):
        (value,) = value
    assert value == []


def test_a_pipe_is_bounded_by_reading_one_byte_past_the_limit(tmp_path: Path) -> None:
    read, write = os.pipe()
    os.write(write, b'{"a": "' + b"x" * 2000 + b'"}')
    os.close(write)
    from broker.errors import InputError

    with pytest.raises(InputError) as caught:
        ArgsFile(Path(f"/dev/fd/{read}")).load(1024)
    os.close(read)
    assert "is more than 1024 bytes" in caught.value.message
    assert caught.value.field == "sandbox.args_bytes"

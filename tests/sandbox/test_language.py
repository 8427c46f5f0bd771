"""One table of limits (``sandbox.language.LIMITS``): docs/rules.md states it, and every
part that holds a limit reads it from there (the checker, the runtime, the host, the
envelope), so none can drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox import language
from sandbox.language import LIMITS, value_problem

ROOT = Path(__file__).resolve().parents[2]
_ROW = re.compile(r"^\| `(\w+)` \| (\d+) \|", re.MULTILINE)


def test_the_rules_doc_states_the_table() -> None:
    doc = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    section = doc[doc.index("## Limits"):]
    stated = {name: int(value) for name, value in _ROW.findall(section)}
    assert stated == LIMITS


def test_every_part_reads_its_limits_from_the_table() -> None:
    from broker.envelope import OUTPUT_BYTES_MAX, SandboxLimits
    from orchestrator import session
    from orchestrator.checker import api, consts, fanout

    assert (session.FRAME_BYTES, session.MESSAGE_BYTES, session.MAX_WAVE, session.WAVE_BYTES,
            session.MAX_PATH, session.MAX_FANOUT, session.MAX_OPEN_RACE_BRANCHES) == (
        LIMITS["frame_bytes"], LIMITS["message_bytes"], LIMITS["wave_frames"],
        LIMITS["wave_bytes"], LIMITS["path_length"], LIMITS["fanout_width"],
        LIMITS["open_race_branches"])
    assert (consts.MAX_STR_LEN, consts.MAX_INT_BITS, consts.MAX_TREE_ITEMS) == (
        LIMITS["string_chars"], LIMITS["int_bits"], LIMITS["value_items"])
    assert (fanout.MAX_FANOUT, api.MAX_TAKE, language.MAX_VALUE_DEPTH) == (
        LIMITS["fanout_width"], LIMITS["take"], LIMITS["value_depth"])
    # The broker sits below the sandbox package: its copy is held here.
    assert OUTPUT_BYTES_MAX == LIMITS["result_bytes"]
    with pytest.raises(ValueError):
        SandboxLimits(output_bytes=LIMITS["result_bytes"] + 1)


def test_the_limits_fit_each_other() -> None:
    # A frame fits the half of a message the runtime fills before it splits a batch. The
    # runtime holds its whole result message to the envelope's output_bytes (at most
    # result_bytes), logs included, or sends OutputTooLarge with 20 log lines at most
    # (each character of a line up to 12 bytes of JSON escapes): either fits one message.
    assert LIMITS["frame_bytes"] <= LIMITS["message_bytes"] // 2
    fallback = 20 * (LIMITS["log_line_chars"] * 12 + 3) + 1000
    assert max(LIMITS["result_bytes"], fallback) < LIMITS["message_bytes"]
    assert LIMITS["message_bytes"] <= LIMITS["wave_bytes"]


@pytest.mark.parametrize(("value", "problem"), [
    ({"a": [1, 2, {"b": None}]}, None),
    ([[[1]]], None),
    ([0] * LIMITS["value_items"], "holds more than"),
    ({"k": list(range(LIMITS["value_items"]))}, "holds more than"),
])
def test_value_problem_counts_values_and_levels(value: object, problem: str | None) -> None:
    found = value_problem(value)
    assert (found is None) if problem is None else (problem in (found or ""))


def test_value_problem_measures_depth_without_recursion() -> None:
    deep: object = 1
    for _ in range(200_000):
        deep = [deep]
    assert "nests deeper than 32" in (value_problem(deep) or "")
    shallow: object = 1
    for _ in range(LIMITS["value_depth"]):
        shallow = [shallow]
    assert value_problem(shallow) is None


@pytest.mark.parametrize("sandbox", ["process", pytest.param("docker", marks=pytest.mark.docker)])
def test_the_runtime_imports_this_module_from_bytecode(request, sandbox) -> None:
    """Both sandboxes hold this module's .pyc in ``/opt/revise/__pycache__`` (the process
    sandbox binds it, the image is built with it), which the runtime's import reads as it
    is: nothing is compiled in the sandbox (``python -v`` names the file a module's code
    object came from)."""
    python = request.getfixturevalue("process_python") if sandbox == "process" else "python3"
    run = request.getfixturevalue("run_process_probe" if sandbox == "process" else "run_probe")
    code = "import sys\nsys.path.insert(0, '/opt/revise')\nimport language\nprint('imported')\n"
    exit_code, output, _ = run(code, command=(python, "-I", "-S", "-B", "-v", "-c", code))
    assert exit_code == 0 and "imported" in output, output[-2000:]
    assert "code object from '/opt/revise/__pycache__/language." in output, output[-2000:]

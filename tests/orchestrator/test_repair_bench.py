"""Smoke test: the repair-loop benchmark runs one case in both modes and reports the
runtime-feedback difference (the benchmark itself asserts nothing)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "repair_loop.py"


def test_bench_reports_rounds_and_spend_with_runtime_feedback_on_and_off(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location("repair_loop_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)  # dataclasses look their module up
    spec.loader.exec_module(bench)
    assert bench.main(["--case", "sizes_constant_edit", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    on, off = data["summary"]["runtime_feedback_on"], data["summary"]["runtime_feedback_off"]
    assert (on["successes"], on["rounds_per_success"]) == (1, 2.0)
    assert (off["successes"], off["rounds_per_success"]) == (0, None)
    # The first run pays three shots; the fourth, refused by the provider, costs nothing.
    assert on["spend_per_episode"] == 0.08 and off["spend_per_episode"] == 0.06
    episodes = {e["mode"]: e for e in data["episodes"]}
    assert episodes["on"]["first_spend"] == episodes["off"]["first_spend"] == 0.06
    assert episodes["on"]["stages"] == ["runtime", "succeeded"]
    assert episodes["on"]["round_spend"] == [0, 0.02]
    assert on["spend_per_episode"] == 0.08 and off["spend_per_episode"] == 0.06

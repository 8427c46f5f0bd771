"""The `revise` command line as a user runs it: a real subprocess, JSON on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "fixtures" / "scripts"


@pytest.fixture
def revise(tmp_path: Path):
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"), "REVISE_SANDBOX": "process",
           "COLUMNS": "200"}

    def call(*argv: str, code: int | None = 0) -> tuple[int, Any, str]:
        done = subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                              capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=120)
        if code is not None:
            assert done.returncode == code, done.stdout + done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        try:
            data = json.loads(done.stdout)
        except ValueError:
            data = done.stdout
        return done.returncode, data, done.stderr

    return call


def script(name: str) -> str:
    return str(SCRIPTS / f"{name}.py")


def test_check_json_valid_and_invalid(revise, tmp_path: Path) -> None:
    _, ok, _ = revise("check", script("e3_v2"), "--json")
    assert ok["valid"] is True and ok["violations"] == []
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nasync def orchestrate(ctx, args):\n    while True:\n"
                   "        pass\n")
    _, report, _ = revise("check", str(bad), "--json", code=1)
    assert report["valid"] is False
    rules = {v["rule"] for v in report["violations"]}
    assert {"R10", "R03"} <= rules
    assert all({"rule", "line", "message", "hint"} <= set(v) for v in report["violations"])


def test_run_then_gate_then_repair_through_the_cli(revise, tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    _, first, _ = revise("run", script("fanout_v1"), "--run-id", "R", "--args", str(args),
                         "--json", code=1)
    assert first["status"] == "failed" and first["revision"] == 1
    assert set(first) >= {"run_id", "revision", "status", "result", "error", "calls",
                          "identities", "orphans", "gate", "certificate"}
    assert set(first["error"]) >= {"type", "message", "identity"}
    assert set(first["identities"][0]) >= {"site", "path", "occurrence", "capability",
                                           "outcome"}

    _, gate, _ = revise("gate", script("fanout_edited"), "--run-id", "R", "--json", code=1)
    assert gate["accepted"] is False
    assert [(c["kind"], c["site"]) for c in gate["counterexamples"]] == [
        ("call_changed", "orchestrate/#0>orchestrate.gen/#0")]
    _, gate, _ = revise("gate", script("fanout_relocated"), "--run-id", "R", "--json")
    assert gate["accepted"] is True
    assert [(r["from"], r["to"]) for r in gate["relocations"]] == [
        ("orchestrate/#0>orchestrate.gen/#0", "orchestrate/#0>gen_one/#0")]
    _, gate, said = revise("gate", script("fanout_repaired"), "--run-id", "R", "--json")
    assert gate["accepted"] is True and gate["relocations"] == [] and said == ""
    _, gate, said = revise("gate", script("fanout_edited"), "--run-id", "r", "--json")
    assert gate["accepted"] is True  # a typo'd run id: nothing committed there, and said so
    assert "run 'r' is not in this run store" in " ".join(said.split())

    _, repair, _ = revise("run", script("fanout_repaired"), "--run-id", "R", "--args",
                          str(args), "--json")
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (3, 1)
    _, cert, _ = revise("certificate", "R", "--json")
    assert cert["differences"] == [] and cert["entries"] == 4
    _, shown, _ = revise("show", "R", "--json")
    assert [r["status"] for r in shown["revisions"]] == ["failed", "succeeded"]
    assert shown["spend"]["attempts"] == 5
    _, runs, _ = revise("runs", "--json")
    assert runs["runs"][0]["run_id"] == "R"
    _, human, _ = revise("show", "R")
    assert "orchestrate/#0>orchestrate.gen/#0@3:0" in human


def test_a_relocated_repair_is_named_by_gate_run_show_and_certificate(revise,
                                                                     tmp_path: Path) -> None:
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["a", "b", "c", "d"]}))
    revise("run", script("fanout_v1"), "--run-id", "M", "--args", str(args), "--json", code=1)
    moved = [("orchestrate/#0>orchestrate.gen/#0", "orchestrate/#0>gen_one/#0")]

    _, human, _ = revise("gate", script("fanout_relocated"), "--run-id", "M")
    assert "relocated orchestrate/#0>orchestrate.gen/#0" in human and "gen_one/#0" in human
    _, run, _ = revise("run", script("fanout_relocated"), "--run-id", "M", "--json")
    assert [(r["from"], r["to"]) for r in run["gate"]["relocations"]] == moved
    # the three committed calls replay through the remap; only the failed one is paid
    assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)
    assert [(r["from"], r["to"]) for r in run["certificate"]["relocations"]] == moved
    _, cert, _ = revise("certificate", "M", "--json")
    assert [(r["from"], r["to"]) for r in cert["relocations"]] == moved
    _, cert_human, _ = revise("certificate", "M")
    assert "relocated orchestrate/#0>orchestrate.gen/#0" in cert_human
    _, shown, _ = revise("show", "M", "--json")
    assert [(r["from"], r["to"]) for r in shown["revisions"][1]["relocations"]] == moved
    assert shown["revisions"][0]["relocations"] == []
    _, shown_human, _ = revise("show", "M")
    assert "revision 2: relocated orchestrate/#0>orchestrate.gen/#0" in shown_human


def test_sites_and_orphans(revise) -> None:
    _, sites, _ = revise("sites", script("shrink_v1"), "--json")
    assert [s["site"] for s in sites["sites"]] == ["orchestrate/for0/#0"]
    revise("run", script("shrink_v1"), "--run-id", "S", "--json", code=1)
    revise("run", script("shrink_v2"), "--run-id", "S", "--json")
    _, orphans, _ = revise("orphans", "S", "--json")
    assert [o["identity"] for o in orphans["orphans"]] == ["orchestrate/for0/#0@:1",
                                                          "orchestrate/for0/#0@:2"]


def test_bad_input_names_the_problem_without_a_trace(revise, tmp_path: Path) -> None:
    _, out, _ = revise("run", str(tmp_path / "missing.py"), "--run-id", "X", "--json",
                          code=2)
    assert "cannot read script" in out["error"]["message"]
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"# -*- coding: latin-1 -*-\nasync def orchestrate(ctx, args):\n"
                      b"    return '\xe9'\n")
    _, out, _ = revise("run", str(latin), "--run-id", "X", "--json", code=2)
    assert "UTF-8" in out["error"]["message"]
    bad_args = tmp_path / "args.json"
    bad_args.write_text("{not json")
    _, out, _ = revise("run", script("e3_v2"), "--run-id", "X", "--args", str(bad_args),
                       "--json", code=2)
    assert "is not JSON" in out["error"]["message"]
    envelope = tmp_path / "env.yaml"
    envelope.write_text("grants: [image.generat]\n")
    _, out, _ = revise("run", script("e3_v2"), "--run-id", "X", "--envelope", str(envelope),
                       "--json", code=2)
    assert "image.generat" in out["error"]["message"]
    _, runs, _ = revise("runs", "--json")
    assert runs["runs"] == [], "refused input leaves no half-written records"


def test_attempts_and_reconcile_commands(revise) -> None:
    _, listed, _ = revise("attempts", "--unresolved", "--json")
    assert listed["attempts"] == []
    _, out, _ = revise("reconcile", "R", "orchestrate/#0@:0", "--json", code=2)
    assert "exactly one of --abandon, --result FILE, --from-log FILE or --from-provider" in \
        out["error"]["message"]
    _, out, _ = revise("reconcile", "R", "orchestrate/#0@:0", "--abandon", "--operator", "ana",
                       "--reason", "test", "--json", code=2)
    assert "no attempt" in out["error"]["message"]


def test_sandbox_build_without_a_docker_engine_names_the_process_sandbox(tmp_path: Path
                                                                         ) -> None:
    """One line that says what to do instead, and nothing installed on the host."""
    env = {**os.environ, "REVISE_HOME": str(tmp_path / "home"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    done = subprocess.run([sys.executable, "-m", "workers.cli", "sandbox", "build"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: no Docker engine answers") and line.endswith(
        "or set REVISE_SANDBOX=process"), line


def test_a_run_without_a_certificate_says_why(revise, tmp_path: Path) -> None:
    """A run every revision of which the checker refused has no certificate (nothing ran);
    an unknown run is no run at all. Neither is 'run it first'."""
    unbounded = tmp_path / "unbounded.py"
    unbounded.write_text("async def orchestrate(ctx, args):\n"
                         "    for i in range(args['n']):\n"
                         "        await ctx.run('image.generate', {'prompt': str(i)})\n")
    revise("run", str(unbounded), "--run-id", "refused", code=1)
    _, _, refused = revise("certificate", "refused", code=2)
    assert "none of its revisions ran" in refused and "revise show refused" in refused
    _, _, unknown = revise("certificate", "nowhere", code=1)
    assert "no run 'nowhere'" in unknown

"""The repair loop against a real OpenAI-compatible HTTP server, and `revise repair` end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.envelope import Envelope
from broker.errors import InputError
from broker.providers import ProviderLog
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import Services, open_services
from orchestrator.models import OpenAIChatBackend, RecordedBackend
from orchestrator.repair import load_context, repair_dynamic_source
from tests.fakes.model_server import FAKE_API_KEY, ModelServer

SCRIPTS = Path(__file__).parent.parent / "fixtures" / "scripts"
SHOTS = {"shots": ["a lighthouse", "waves", "a gull", "fog"]}
FROZEN_LINE = 'return await ctx.run("image.generate", {"prompt": shot, "size": size})'

# A two-call script whose second call fails: the first call is frozen, the second is not.
TWO_STEP_V1 = '''async def orchestrate(ctx, args):
    plan = await ctx.run("text.generate", {"prompt": "plan the hero shot"})
    hero = await ctx.run("image.generate", {"prompt": plan["text"], "size": "999x999"})
    return hero["artifact"]["id"]
'''
TWO_STEP_TRUNCATED = '''async def orchestrate(ctx, args):
    plan = await ctx.run("text.generate", {"prompt": "plan the hero shot"})
    return plan["text"]
'''
TWO_STEP_FIXED = TWO_STEP_V1.replace("999x999", "1024x1024")


def script(name: str) -> str:
    return (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")


def fenced(text: str, prose: str = "Here is the repaired script.") -> str:
    return f"{prose}\n\n```python\n{text}```\n"


def open_home(home: Path) -> Services:
    return open_services(Settings(home=home, sandbox=SandboxKind.PROCESS))


@pytest.fixture(scope="module")
def fanout_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """One failed four-shot run (3 committed, 1 failed); the loop never writes revisions."""
    services = open_home(tmp_path_factory.mktemp("fanout"))
    first = services.pipeline().run("four", script("fanout_v1"), SHOTS, Envelope()).to_json()
    assert first["status"] == "failed" and first["calls"]["succeeded"] == 3
    yield services
    services.close()


@pytest.fixture(scope="module")
def two_step_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    services = open_home(tmp_path_factory.mktemp("two-step"))
    first = services.pipeline().run("two", TWO_STEP_V1, {}, Envelope()).to_json()
    assert first["status"] == "failed" and first["calls"]["succeeded"] == 1
    yield services
    services.close()


def http_model(server: ModelServer) -> OpenAIChatBackend:
    return OpenAIChatBackend(base_url=server.base_url, model="fake-coder", api_key=FAKE_API_KEY,
                             sleep=lambda s: None)


def test_first_prompt_carries_failure_frozen_sites_and_scripts(fanout_run: Services) -> None:
    with ModelServer([fenced(script("fanout_repaired"))]) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server), args=SHOTS)
        body = server.bodies()[0]
    assert result.accepted and result.rewrites == 1
    system, user = body["messages"]
    assert system["role"] == "system" and "image.generate" in system["content"]
    assert "{{CATALOG}}" not in system["content"]
    prompt = user["content"]
    site = "orchestrate/#0>orchestrate.gen/#0"
    for needle in ("CapabilityError", f"{site}@3:0", "invalid_parameter", "image.generate",
                   f"`{site}`", "3 committed occurrence(s)",
                   FROZEN_LINE, 'size = "999x999" if i == last else "1024x1024"',
                   '"a lighthouse"'):
        assert needle in prompt, needle


def test_relocation_is_accepted_by_the_default_gate(fanout_run: Services) -> None:
    relocation = fenced(script("fanout_relocated"), "I moved the call into a helper.")
    with ModelServer([relocation]) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server))
    assert result.accepted and result.rewrites == 1
    assert result.candidate == script("fanout_relocated")


def test_relocation_is_stopped_by_the_strict_gate_and_fed_back(fanout_run: Services) -> None:
    relocation = fenced(script("fanout_relocated"), "I moved the call into a helper.")
    with ModelServer([relocation, fenced(script("fanout_repaired"))]) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server), max_attempts=3,
                                       relocation="stop")
        prompts = server.prompts()
        second = server.bodies()[1]["messages"]
    assert result.accepted and result.rewrites == 2
    assert result.candidate == script("fanout_repaired")
    first = result.attempts[0]
    assert first.refused_by == ("gate",)
    assert [(c.kind, c.site) for c in first.counterexamples] == [
        ("removed", "orchestrate/#0>orchestrate.gen/#0")]
    # The NEXT prompt names the removed frozen site and its committed source line.
    assert len(prompts) == 2
    assert "removed" in prompts[1] and "orchestrate/#0>orchestrate.gen/#0" in prompts[1]
    assert FROZEN_LINE in prompts[1]
    assert "gen_one/#0" in prompts[1]  # where the candidate moved it
    assert second[-2] == {"role": "assistant", "content": relocation}
    assert result.attempts[1].accepted


def test_edited_call_expression_is_call_changed_with_both_lines(fanout_run: Services) -> None:
    edited = script("fanout_repaired").replace('"size": size}', '"size": "1024x1024"}')
    with ModelServer([fenced(edited), fenced(script("fanout_repaired"))]) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server))
        feedback = server.prompts()[1]
    assert result.attempts[0].refused_by == ("gate",)
    assert result.attempts[0].counterexamples[0].kind == "call_changed"
    assert '{"prompt": shot, "size": "1024x1024"}' in feedback  # the candidate's line
    assert FROZEN_LINE in feedback  # the committed one
    assert result.accepted


def test_truncated_candidate_is_refused_by_the_call_count_guard(two_step_run: Services) -> None:
    with ModelServer([fenced(TWO_STEP_TRUNCATED), fenced(TWO_STEP_FIXED)]) as server:
        result = repair_dynamic_source(store=two_step_run.store, run_id="two",
                                       model=http_model(server))
        feedback = server.prompts()[1]
    first = result.attempts[0]
    assert first.refused_by == ("call_count",)  # checker and gate both accept it
    assert (first.counted, first.calls, first.required_calls) == ("calls", 1, 2)
    assert "Call-count guard" in feedback
    assert "your candidate can make at most 1 capability call(s)" in feedback
    # The capability it has fewer calls of is named with its line in the failed script.
    assert [(s.capability, s.calls, s.required, [c.line for c in s.expressions])
            for s in first.short] == [("image.generate", 0, 1, [3])]
    assert ("- image.generate: your candidate makes none where the failed script can make "
            "1 (line 3 of the failed script):\n"
            '      hero = await ctx.run("image.generate"') in feedback
    assert result.accepted and result.candidate == TWO_STEP_FIXED


def test_unbounded_loop_gets_r03_feedback_and_is_fixed(fanout_run: Services) -> None:
    looping = script("fanout_repaired").replace(
        "    return [img", "    while True:\n        if len(images) > 0:\n            break\n"
        "    return [img")
    with ModelServer([fenced(looping), fenced(script("fanout_repaired"))]) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server))
        feedback = server.prompts()[1]
    first = result.attempts[0]
    assert first.refused_by == ("check",)
    assert "R03" in {v.rule for v in first.violations}
    r03 = next(v for v in first.violations if v.rule == "R03")
    assert f"R03 line {r03.line}" in feedback and r03.hint in feedback
    assert result.accepted and result.rewrites == 2


def test_max_attempts_is_honoured_and_failure_is_clean(fanout_run: Services) -> None:
    edited = fenced(script("fanout_edited"))
    with ModelServer([edited] * 5) as server:
        result = repair_dynamic_source(store=fanout_run.store, run_id="four",
                                       model=http_model(server), max_attempts=2)
        assert server.served == 2
    assert not result.accepted and result.candidate is None
    assert [a.refused_by for a in result.attempts] == [("gate",), ("gate",)]
    data = result.to_json()
    assert data["accepted"] is False and data["rewrites"] == 2
    assert json.loads(json.dumps(data)) == data


def test_answer_without_a_script_is_refused(fanout_run: Services) -> None:
    model = RecordedBackend.of("I cannot help with that.", fenced(script("fanout_repaired")))
    result = repair_dynamic_source(store=fanout_run.store, run_id="four", model=model)
    assert result.attempts[0].refused_by == ("extract",)
    assert "contained no script" in result.attempts[0].message
    assert result.accepted


def test_every_candidate_is_audited(fanout_run: Services) -> None:
    before = len(fanout_run.store.list_events("four"))
    model = RecordedBackend.of(fenced(script("fanout_edited")),
                               fenced(script("fanout_repaired")))
    repair_dynamic_source(store=fanout_run.store, run_id="four", model=model)
    kinds = [e.kind for e in fanout_run.store.list_events("four")[before:]]
    assert kinds == ["repair_refused", "repair_accepted"]


def test_unknown_and_succeeded_runs_are_input_errors(fanout_run: Services,
                                                     tmp_path: Path) -> None:
    with pytest.raises(InputError, match="has no revisions"):
        load_context(fanout_run.store, "nope")
    services = open_home(tmp_path)
    try:
        services.pipeline().run("ok", script("e3_v2"), {}, Envelope()).to_json()
        with pytest.raises(InputError, match="nothing to repair"):
            load_context(services.store, "ok")
    finally:
        services.close()
    with pytest.raises(InputError, match="at least one"):
        repair_dynamic_source(store=fanout_run.store, run_id="four",
                              model=RecordedBackend.of(), max_attempts=0)


def test_a_gate_refused_revision_is_skipped_when_loading(tmp_path: Path) -> None:
    services = open_home(tmp_path)
    try:
        pipeline = services.pipeline()
        pipeline.run("r", script("fanout_v1"), SHOTS, Envelope()).to_json()
        moved = pipeline.run("r", script("fanout_edited"), SHOTS, Envelope()).to_json()
        assert moved["status"] == "stopped"
        context = load_context(services.store, "r")
    finally:
        services.close()
    assert (context.failed.revision, context.original.revision) == (1, 1)
    assert context.frozen_lines["orchestrate/#0>orchestrate.gen/#0"].text == FROZEN_LINE


# ---- end to end: fail, `revise repair --execute`, replay ---------------------------------------

def test_revise_repair_execute_replays_three_and_executes_one(tmp_path: Path) -> None:
    from workers.cli import app

    home = tmp_path / "home"
    services = open_home(home)
    try:
        first = services.pipeline().run("e2e", script("fanout_v1"), SHOTS, Envelope()).to_json()
    finally:
        services.close()
    assert first["status"] == "failed"
    assert (first["calls"]["succeeded"], first["calls"]["failed"]) == (3, 1)
    recorded = tmp_path / "model.jsonl"
    recorded.write_text("".join(json.dumps({"purpose": "repair", "output": fenced(script(n))})
                                + "\n" for n in ("fanout_edited", "fanout_repaired")))
    args = tmp_path / "args.json"
    args.write_text(json.dumps(SHOTS))
    result = CliRunner().invoke(
        app, ["repair", "--run-id", "e2e", "--model", f"recorded:{recorded}", "--execute",
              "--args", str(args), "--json"],
        env={"REVISE_HOME": str(home), "REVISE_SANDBOX": "process"})
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["accepted"] is True and data["rewrites"] == 2
    assert data["attempts"][0]["refused_by"] == ["gate"]
    run = data["run"]
    assert run["status"] == "succeeded" and run["revision"] == 2
    assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)
    log = ProviderLog(home / "provider-log.jsonl").read()
    assert len(log) == 5  # 4 in the first run, 1 in the repair


def test_revise_repair_reports_config_errors_without_traceback(tmp_path: Path) -> None:
    from workers.cli import app

    result = CliRunner().invoke(
        app, ["repair", "--run-id", "x", "--model", "gpt-x", "--json"],
        env={"REVISE_HOME": str(tmp_path), "REVISE_MODEL_BASE_URL": ""})
    assert result.exit_code == 2
    assert "REVISE_MODEL_BASE_URL" in json.loads(result.stdout)["error"]["message"]
    assert "Traceback" not in result.output


def test_demo_uses_the_real_loop(tmp_path: Path) -> None:
    from orchestrator.demo.run import run_demo

    services = open_home(tmp_path)
    try:
        summary = run_demo(services, None)
    finally:
        services.close()
    assert summary["ok"], summary["repair_loop"]
    assert (summary["replayed"], summary["executed"], summary["gate_stops"]) == (3, 1, 1)

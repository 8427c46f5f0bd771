"""The repair loop end to end against the scripted OpenAI-compatible endpoint (real HTTP on
127.0.0.1), the embedded pipeline and the process sandbox: stored inputs, committed
payloads in the prompt, runtime refusals fed back as the next round, bounded waiting,
and the exit codes of `revise repair`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from broker.catalog import CATALOG
from broker.envelope import Budget, Envelope
from broker.providers import ProviderLog
from broker.settings import OrphanPolicy, SandboxKind, Settings
from orchestrator.cli_common import (
    EXIT_CANDIDATE_FAILED,
    EXIT_MODEL_UNAVAILABLE,
    EXIT_NO_CANDIDATE,
    EXIT_OK,
)
from orchestrator.embedded import Services, open_services
from orchestrator.models import OpenAIChatBackend
from orchestrator.repair import repair_dynamic_source
from orchestrator.repair_context import load_context
from orchestrator.repair_prompt import request_message
from tests.fakes.model_server import FAKE_API_KEY, ModelServer
from tests.fakes.openai_server import CHAT, error, ok_chat, slow
from workers.cli import app

SHOTS = {"shots": ["a lighthouse", "waves", "a gull", "fog"]}

SIZES_V1 = '''"""Four shots; the last size is one the provider does not support."""

SIZES = ["1024x1024", "1024x1024", "1024x1024", "999x999"]


async def orchestrate(ctx, args):
    async def gen(i, shot):
        return await ctx.run("image.generate", {"prompt": shot, "size": SIZES[i]})

    images = await ctx.parallel([gen(i, s) for i, s in enumerate(args["shots"][:4])])
    return {"images": [img["artifact"]["id"] for img in images[:4]]}
'''
# Keeps every call expression (the gate accepts it) but changes the committed sizes.
SIZES_ALL_CHANGED = SIZES_V1.replace(
    '["1024x1024", "1024x1024", "1024x1024", "999x999"]', '["512x512"] * 4')
SIZES_FIXED = SIZES_V1.replace('"999x999"', '"1024x1024"')
SIZES_STILL_BAD = SIZES_V1.replace('"999x999"', '"777x777"')
# Moves the size into the call expression: the gate refuses it (call_changed).
SIZES_EDITED = SIZES_V1.replace('"size": SIZES[i]', '"size": "1024x1024"')

HERO_V1 = '''async def orchestrate(ctx, args):
    hero = await ctx.run("image.generate", {"prompt": "hero", "size": "1024x1024"})
    detail = await ctx.run("image.generate", {"prompt": "detail", "size": "999x999"})
    return [hero["artifact"]["id"], detail["artifact"]["id"]]
'''
HERO_FIXED = HERO_V1.replace("999x999", "512x512")
# Pays for the hero shot a second time at a new call: the ledger denies it (auto policy).
HERO_REPEAT = HERO_FIXED.replace(
    "    return [hero", '    again = await ctx.run("image.generate", {"prompt": "hero", '
    '"size": "1024x1024"})\n    return [again')

# Stops short of the committed third shot: nothing new runs, the orphan policy decides.
# (Its comprehension can still make four calls, so the call-count guard lets it through;
# slicing to [:2] would be refused before it ran, for two calls fewer.)
SIZES_TWO_ONLY = SIZES_FIXED.replace('enumerate(args["shots"][:4])]',
                                     'enumerate(args["shots"][:4]) if i < 2]')


def fenced(text: str, prose: str = "Here is the repaired script.") -> str:
    return f"{prose}\n\n```python\n{text}```\n"


def settings_for(home: Path, **kwargs: Any) -> Settings:
    return Settings(home=home, sandbox=SandboxKind.PROCESS, **kwargs)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    opened = open_services(settings_for(tmp_path / "home"))
    yield opened
    opened.close()


def http_model(server: ModelServer) -> OpenAIChatBackend:
    return OpenAIChatBackend(base_url=server.base_url, model="fake-coder", api_key=FAKE_API_KEY,
                             sleep=lambda s: None)


def executor(services: Services, run_id: str, args: Any, envelope: Envelope | None = None):
    pipeline = services.pipeline()
    return lambda text: pipeline.run(run_id, text, args, envelope or Envelope()).to_json()


def provider_calls(home: Path) -> int:
    return len(ProviderLog(home / "provider-log.jsonl").read())


# ---- the prompt ---------------------------------------------------------------------------------

def test_the_prompt_lists_committed_payloads_fanout_elements_and_the_round_budget(
        services: Services) -> None:
    first = services.pipeline().run("p", SIZES_V1, SHOTS, Envelope()).to_json()
    assert first["status"] == "failed"
    context = load_context(services.store, "p")  # args: the ones stored with the run
    assert context.args == SHOTS
    prompt = request_message(context, rounds=5)
    assert "Round 1 of 5. You have 5 answer(s)" in prompt
    site = "orchestrate/#0>orchestrate.gen/#0"
    for index, shot in enumerate(SHOTS["shots"][:3]):
        assert (f"`{site}@{index}:0`: path [{index}]: element {index} of "
                f'`enumerate(args["shots"][:4])` in the ctx.parallel at line 10, = '
                f'[{index}, "{shot}"]; payload {{"model": "local-image-1", "prompt": '
                f'"{shot}", "size": "1024x1024"}}') in prompt
    # The failed call, its fanout element and the payload it sent.
    assert (f"- failed call `{site}@3:0` (image.generate), path [3]: element 3 of "
            '`enumerate(args["shots"][:4])` in the ctx.parallel at line 10, = [3, "fog"]'
            in prompt)
    assert 'payload sent: {"model": "local-image-1", "prompt": "fog", "size": "999x999"}' \
        in prompt
    assert '"shots": ["a lighthouse", "waves", "a gull", "fog"]' in prompt


def test_secret_payload_fields_are_redacted_by_the_catalog(services: Services) -> None:
    services.pipeline().run("s", SIZES_V1, SHOTS, Envelope())
    secret = CATALOG["image.generate"].model_copy(update={"secret_fields": frozenset({"prompt"})})
    catalog = {**CATALOG, "image.generate": secret}
    prompt = request_message(load_context(services.store, "s"), catalog)
    assert '"prompt": "<secret>"' in prompt
    assert '"prompt": "a lighthouse"' not in prompt and '"prompt": "fog"' not in prompt


def test_the_prompt_is_bounded_for_large_fanouts(services: Services) -> None:
    many = {"shots": [f"shot {i}" for i in range(200)]}
    wide = SIZES_V1.replace('SIZES[i]', '"1024x1024" if i < 150 else "999x999"').replace(
        "[:4]", "[:200]")
    services.pipeline().run("wide", wide, many, Envelope())
    prompt = request_message(load_context(services.store, "wide"))
    assert "more committed identities at this site (not listed" in prompt
    assert len(prompt) < 20_000


def test_checker_feedback_quotes_the_offending_line(services: Services) -> None:
    services.pipeline().run("chk", SIZES_V1, SHOTS, Envelope())
    looping = SIZES_FIXED.replace("    images = await", "    while True:\n        break\n"
                                  "    images = await")
    with ModelServer([fenced(looping), fenced(SIZES_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="chk",
                                       model=http_model(server), max_attempts=4)
        feedback = server.prompts()[1]
    assert result.attempts[0].refused_by == ("check",)
    assert feedback.startswith("Round 2 of 4. Candidate 1 was refused before anything ran")
    assert "R03 line 10:" in feedback and "your line 10:\n      while True:" in feedback


def test_an_answer_cut_off_at_the_output_limit_is_a_refused_round(services: Services
                                                                  ) -> None:
    """Cut before its return statement, the script still parses and would run (returning
    None as the repaired result, three new images paid): the model hears it was cut."""
    services.pipeline().run("cut", SIZES_V1, SHOTS, Envelope())
    cut = fenced(SIZES_FIXED).split("    return {")[0]  # no closing fence either
    with ModelServer([fenced(SIZES_FIXED)]) as server:
        server.queue(CHAT, ok_chat(cut, finish_reason="length"))
        result = repair_dynamic_source(store=services.store, run_id="cut",
                                       model=http_model(server), max_attempts=3,
                                       execute=executor(services, "cut", SHOTS))
        feedback = server.prompts()[1]
    first = result.attempts[0]
    assert first.refused_by == ("extract",) and first.candidate is None
    assert [r.code for r in first.refusals] == ["answer_cut_off"]
    assert feedback.startswith("Round 2 of 3. Candidate 1 was refused before anything ran")
    assert "cut off at your output limit" in feedback
    assert result.accepted and result.run is not None
    assert result.run["status"] == "succeeded" and len(result.run["result"]["images"]) == 4


# ---- runtime refusals become the next round -----------------------------------------------------

def test_a_payload_changing_candidate_is_caught_at_runtime_and_repaired_next_round(
        services: Services) -> None:
    home = services.settings.home
    first = services.pipeline().run("div", SIZES_V1, SHOTS, Envelope()).to_json()
    assert first["calls"]["succeeded"] == 3 and provider_calls(home) == 4
    with ModelServer([fenced(SIZES_ALL_CHANGED, "Use 512x512 everywhere."),
                      fenced(SIZES_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="div",
                                       model=http_model(server), max_attempts=3,
                                       execute=executor(services, "div", SHOTS))
        feedback = server.prompts()[1]
        second = server.bodies()[1]["messages"]
    diverged, fixed = result.attempts
    # The gate cannot see the data change; the runtime stops it before any spend.
    assert diverged.accepted and diverged.stage == "runtime" and diverged.spend == 0
    assert diverged.run is not None and diverged.run.refusal == "divergence"
    assert diverged.run.executed == 0
    # Its counterexample is the next request: the committed payload, the element, the lines.
    assert second[-2] == {"role": "assistant",
                          "content": fenced(SIZES_ALL_CHANGED, "Use 512x512 everywhere.")}
    assert feedback.startswith("Round 2 of 3. Candidate 1 passed the checker and the gate "
                               "and ran as revision 2, but the runtime stopped it "
                               "(divergence: ReplayDivergence). It spent 0 on 0 provider")
    site = "orchestrate/#0>orchestrate.gen/#0"
    for index, shot in enumerate(SHOTS["shots"][:3]):  # every diverged call, with its data
        assert (f"- divergence at `{site}@{index}:0` (image.generate), path [{index}]: "
                f'element {index} of `enumerate(args["shots"][:4])` in the ctx.parallel at '
                f'line 10, = [{index}, "{shot}"]:\n    the committed payload: {{"model": '
                f'"local-image-1", "prompt": "{shot}", "size": "1024x1024"}}') in feedback
    assert "your candidate sent another payload to this call (sha256:" in feedback
    assert ('your line 8:\n      return await ctx.run("image.generate", {"prompt": shot, '
            '"size": SIZES[i]})') in feedback
    assert "Data that reached a committed call must reach it unchanged" in feedback
    # Round 2 succeeds on the same run: 3 replayed, 1 executed, one paid call in all.
    assert fixed.run is not None and fixed.run.status == "succeeded"
    assert (fixed.run.replayed, fixed.run.executed, fixed.spend) == (3, 1, 0.02)
    assert result.outcome == "succeeded" and result.spend == 0.02
    assert provider_calls(home) == 5
    events = [e.kind for e in services.store.list_events("div") if e.kind.startswith("repair")]
    assert events == ["repair_runtime_refused", "repair_accepted"]


def test_a_ledger_denial_goes_back_with_the_calls_it_committed(services: Services) -> None:
    services.pipeline().run("rep", HERO_V1, {}, Envelope())
    with ModelServer([fenced(HERO_REPEAT), fenced(HERO_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="rep",
                                       model=http_model(server), max_attempts=2,
                                       execute=executor(services, "rep", {}))
        feedback = server.prompts()[1]
    denied, fixed = result.attempts
    assert denied.run is not None and denied.run.refusal == "ledger"
    assert denied.spend == 0.02  # the fixed detail shot was paid before the denial
    assert "- semantic repeat at `orchestrate/#2@:0` (image.generate):" in feedback
    assert "this exact payload was already paid at `orchestrate/#0@:0`" in feedback
    assert "take= does not help" in feedback and "ctx.run(..., take=2)" not in feedback
    assert "Before it stopped, the candidate committed these calls; they are frozen now too:" \
        "\n- `orchestrate/#1@:0` (image.generate)" in feedback
    assert fixed.run is not None and fixed.run.status == "succeeded"
    assert (fixed.run.replayed, fixed.run.executed, fixed.spend) == (2, 0, 0)
    assert result.spend == 0.02
    # The call committed by the candidate is quoted from the candidate, not from the
    # failed script (whose call at that site had another expression).
    line = load_context(services.store, "rep", failed_revision=1).frozen_lines["orchestrate/#1"]
    assert (line.where, line.line) == ("revision 2", 3) and '"512x512"' in line.text


def test_an_orphan_stop_goes_back_as_the_next_round(tmp_path: Path) -> None:
    services = open_services(settings_for(tmp_path, orphan_policy=OrphanPolicy.STOP))
    try:
        services.pipeline().run("orph", SIZES_V1, SHOTS, Envelope())
        with ModelServer([fenced(SIZES_TWO_ONLY), fenced(SIZES_FIXED)]) as server:
            result = repair_dynamic_source(store=services.store, run_id="orph",
                                           model=http_model(server), max_attempts=2,
                                           execute=executor(services, "orph", SHOTS))
            feedback = server.prompts()[1]
    finally:
        services.close()
    skipped, fixed = result.attempts
    assert skipped.run is not None and skipped.run.refusal == "orphans"
    assert "(orphans: OrphanStop)" in feedback
    assert "did not reach 1 committed identity" in feedback
    assert ('- `orchestrate/#0>orchestrate.gen/#0@2:0` (image.generate); payload '
            '{"model": "local-image-1", "prompt": "a gull", "size": "1024x1024"}') in feedback
    assert fixed.run is not None and fixed.run.status == "succeeded"


def test_a_budget_stop_goes_back_as_the_next_round(services: Services) -> None:
    tight = Envelope(budget=Budget(max_calls=5))  # the first run made 4 provider attempts
    services.pipeline().run("budget", SIZES_V1, SHOTS, tight)
    captioned = SIZES_FIXED.replace(
        '    return {"images"', '    note = await ctx.run("text.generate", {"prompt": "caption"})\n'
        '    return {"note": note["text"], "images"')
    with ModelServer([fenced(captioned), fenced(SIZES_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="budget",
                                       model=http_model(server), max_attempts=2,
                                       execute=executor(services, "budget", SHOTS, tight))
        feedback = server.prompts()[1]
    over, fixed = result.attempts
    assert over.run is not None and over.run.refusal == "budget" and over.spend == 0.02
    assert "(budget: BudgetExceeded)" in feedback and "allows no more new provider calls" \
        in feedback
    assert fixed.run is not None and fixed.run.status == "succeeded"
    assert (fixed.run.replayed, fixed.run.executed, fixed.spend) == (4, 0, 0)


def test_runtime_feedback_off_ends_at_the_first_run(services: Services) -> None:
    services.pipeline().run("off", SIZES_V1, SHOTS, Envelope())
    with ModelServer([fenced(SIZES_ALL_CHANGED), fenced(SIZES_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="off",
                                       model=http_model(server), max_attempts=3,
                                       execute=executor(services, "off", SHOTS),
                                       runtime_feedback=False)
        assert server.served == 1
    assert result.outcome == "failed" and result.rewrites == 1


# ---- `revise repair`: stored inputs, spend per round, exit codes --------------------------------

def invoke(home: Path, server: ModelServer | None, *argv: str, **env: str):
    environment = {"REVISE_HOME": str(home), "REVISE_SANDBOX": "process",
                   "REVISE_MODEL_API_KEY": FAKE_API_KEY, "REVISE_MODEL_BACKOFF_SECONDS": "0",
                   "REVISE_MODEL_BASE_URL": server.base_url if server else "", **env}
    return CliRunner().invoke(app, list(argv), env=environment)


def first_run(home: Path, run_id: str, script: str, args: Any,
              envelope: Envelope | None = None) -> dict[str, Any]:
    services = open_services(settings_for(home))
    try:
        return services.pipeline().run(run_id, script, args, envelope or Envelope()).to_json()
    finally:
        services.close()


def test_repair_execute_reuses_the_stored_args_and_reports_spend_per_round(
        tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "cli", SIZES_V1, SHOTS)
    with ModelServer([fenced(SIZES_EDITED), fenced(SIZES_ALL_CHANGED),
                      fenced(SIZES_FIXED)]) as server:
        result = invoke(home, server, "repair", "--run-id", "cli", "--model", "fake-coder",
                        "--execute", "--max-attempts", "5", "--json")
        prompt = server.prompts()[0]
    assert result.exit_code == EXIT_OK, result.output
    data = json.loads(result.stdout)
    assert "reusing the args stored with revision 1 of run cli" in result.stderr
    assert data["inputs"]["args"]["source"] == "stored"
    assert '"shots": ["a lighthouse", "waves", "a gull", "fog"]' in prompt
    assert data["outcome"] == "succeeded" and data["rounds"] == 3
    assert [a["stage"] for a in data["attempts"]] == ["gate", "runtime", "succeeded"]
    assert [a["spend"] for a in data["attempts"]] == [0, 0, 0.02]
    assert data["attempts"][1]["run"]["refusal"] == "divergence"
    run = data["run"]
    assert run["status"] == "succeeded" and run["revision"] == 3  # the gate-refused round
    assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)  # made no revision


def test_repair_exit_code_when_no_candidate_is_admissible(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "none", SIZES_V1, SHOTS)
    with ModelServer([fenced(SIZES_EDITED)] * 2) as server:
        result = invoke(home, server, "repair", "--run-id", "none", "--model", "m",
                        "--execute", "--max-attempts", "2")
    assert result.exit_code == EXIT_NO_CANDIDATE, result.output
    assert "no admissible candidate in 2 round(s)" in result.stdout
    assert provider_calls(home) == 4  # the first run only


def test_repair_exit_code_when_the_candidate_ran_and_failed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "bad", SIZES_V1, SHOTS)
    with ModelServer([fenced(SIZES_STILL_BAD)]) as server:
        result = invoke(home, server, "repair", "--run-id", "bad", "--model", "m",
                        "--execute", "--json")
    assert result.exit_code == EXIT_CANDIDATE_FAILED, result.output
    data = json.loads(result.stdout)
    assert data["outcome"] == "failed" and data["run"]["error"]["type"] == "CapabilityError"
    assert data["attempts"][0]["spend"] == 0.0  # the provider refused it: not charged


def test_repair_exit_code_when_the_endpoint_fails(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "down", SIZES_V1, SHOTS)
    with ModelServer([]) as server:
        server.queue(CHAT, error(503), error(503))
        result = invoke(home, server, "repair", "--run-id", "down", "--model", "m", "--json",
                        REVISE_MODEL_RETRIES="1")
    assert result.exit_code == EXIT_MODEL_UNAVAILABLE, result.output
    data = json.loads(result.stdout)
    assert data["outcome"] == "endpoint_failed"
    assert "kept failing after 2 attempts" in data["endpoint_error"]["message"]
    assert FAKE_API_KEY not in result.output


def test_a_hung_endpoint_is_bounded_by_the_setting(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "hung", SIZES_V1, SHOTS)
    with ModelServer([]) as server:
        server.queue(CHAT, slow(60), slow(60))
        started = time.monotonic()
        result = invoke(home, server, "repair", "--run-id", "hung", "--model", "m",
                        REVISE_MODEL_TIMEOUT_SECONDS="0.5", REVISE_MODEL_RETRIES="1")
        elapsed = time.monotonic() - started
    assert result.exit_code == EXIT_MODEL_UNAVAILABLE, result.output
    assert elapsed < 6
    assert "no answer within 0.5 s after 2 attempts" in result.stdout.replace("\n", " ")


def test_repair_help_documents_the_exit_codes() -> None:
    result = CliRunner().invoke(app, ["repair", "--help"], env={"COLUMNS": "200"})
    text = " ".join(result.stdout.split())
    for code, meaning in ((EXIT_CANDIDATE_FAILED, "a candidate ran and did not succeed"),
                          (EXIT_NO_CANDIDATE, "no admissible candidate"),
                          (EXIT_MODEL_UNAVAILABLE, "the model endpoint gave no usable answer")):
        assert f"{code} {meaning}" in text


# ---- `revise run` on an existing run id ---------------------------------------------------------

def test_run_on_an_existing_run_reuses_the_stored_inputs_and_says_so(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first_run(home, "again", SIZES_V1, SHOTS, Envelope(orphan_policy=OrphanPolicy.STOP))
    script = tmp_path / "fixed.py"
    script.write_text(SIZES_FIXED)
    result = invoke(home, None, "run", str(script), "--run-id", "again", "--json")
    assert result.exit_code == EXIT_OK, result.output
    assert "reusing the args stored with revision 1 of run again" in result.stderr
    assert "reusing the envelope stored with revision 1" in result.stderr
    run = json.loads(result.stdout)
    assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)
    services = open_services(settings_for(home))
    try:
        first, second = services.store.list_revisions("again")
    finally:
        services.close()
    assert (second.args_digest, second.envelope_digest) == (first.args_digest,
                                                            first.envelope_digest)

    other = tmp_path / "args.json"
    other.write_text(json.dumps({"shots": ["x"]}))
    changed = invoke(home, None, "run", str(script), "--run-id", "again", "--args",
                     str(other), "--json")
    assert "the args differ from the ones stored with revision 2 of run again" \
        in changed.stderr.replace("\n", " ")



def test_a_reply_with_half_a_surrogate_pair_is_read_and_quoted_back(
        services: Services) -> None:
    """The endpoint escapes half a surrogate pair in its JSON: the candidate gets U+FFFD
    there, and the next round's request, which quotes that reply, can be sent (it raised
    UnicodeEncodeError from inside httpx, and the repair ended in a traceback)."""
    services.pipeline().run("sur", HERO_V1, {}, Envelope())
    refused = HERO_FIXED.replace("async def", "import os  # caf\ud800\nasync def", 1)
    with ModelServer([fenced(refused), fenced(HERO_FIXED)]) as server:
        result = repair_dynamic_source(store=services.store, run_id="sur",
                                       model=http_model(server), max_attempts=3,
                                       execute=executor(services, "sur", {}))
        quoted = server.bodies()[1]["messages"][-2]["content"]
    assert [a.stage for a in result.attempts] == ["check", "succeeded"]
    assert result.outcome == "succeeded"
    assert "import os  # caf\ufffd\n" in quoted

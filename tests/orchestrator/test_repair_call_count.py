"""The repair loop's call-count guard counts the calls a script can make, not its call
expressions: a loop over a literal list of three is three calls (``Site.max_calls``, the
static bound admission already computes), so folding three literal calls into such a loop
is no loss, and shrinking such a loop to one call is."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.catalog import CATALOG
from broker.envelope import Envelope
from broker.errors import CallsDropped, error_from_json
from broker.settings import SandboxKind, Settings
from orchestrator.cli_common import EXIT_NO_CANDIDATE, EXIT_OK
from orchestrator.embedded import Services, open_services
from orchestrator.repair import judge, load_context
from orchestrator.repair_context import CapabilityCalls, bounded_sites, capability_calls

# Three literal calls; the first one fails (a size the provider refuses): nothing commits.
THREE_LINES = '''async def orchestrate(ctx, args):
    a = await ctx.run("image.generate", {"prompt": "A", "size": "999x999"})
    b = await ctx.run("image.generate", {"prompt": "B", "size": "999x999"})
    c = await ctx.run("image.generate", {"prompt": "C", "size": "999x999"})
    return [a["artifact"]["id"], b["artifact"]["id"], c["artifact"]["id"]]
'''
# The same three shots as one call expression in a loop over a literal list.
THREE_IN_A_LOOP = '''async def orchestrate(ctx, args):
    images = []
    for p in ["A", "B", "C"]:
        image = await ctx.run("image.generate", {"prompt": p, "size": "1024x1024"})
        images.append(image["artifact"]["id"])
    return images
'''
LOOP_V1 = THREE_IN_A_LOOP.replace("1024x1024", "999x999")
# One shot where the failed script had three: two shots of work are gone.
ONE_SHOT = '''async def orchestrate(ctx, args):
    image = await ctx.run("image.generate", {"prompt": "A", "size": "1024x1024"})
    return [image["artifact"]["id"]]
'''
# The loop over the run's input: no static bound (R03 refuses it too).
OVER_ARGS = THREE_IN_A_LOOP.replace('["A", "B", "C"]', 'args["prompts"]')
NAMES = frozenset(CATALOG)


def fenced(text: str) -> str:
    return f"Here is the repaired script.\n\n```python\n{text}```\n"


def open_home(home: Path) -> Services:
    return open_services(Settings(home=home, sandbox=SandboxKind.PROCESS))


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Services]:
    """Run "lines" (three literal calls) and "loop" (a loop of three), each failed at its
    first call with nothing committed."""
    services = open_home(tmp_path_factory.mktemp("call-count"))
    for run_id, text in (("lines", THREE_LINES), ("loop", LOOP_V1)):
        report = services.pipeline().run(run_id, text, {}, Envelope()).to_json()
        assert report["status"] == "failed" and report["calls"]["succeeded"] == 0
    yield services
    services.close()


# ---- what a script can make ------------------------------------------------------------------


def counts(text: str) -> dict[str, int | None]:
    return {c.capability: c.at_most
            for c in capability_calls(text, bounded_sites(text) or [])}


def test_calls_are_counted_by_the_static_bound_of_their_loops() -> None:
    assert counts(THREE_LINES) == {"image.generate": 3}
    assert counts(THREE_IN_A_LOOP) == {"image.generate": 3}
    assert counts(ONE_SHOT) == {"image.generate": 1}
    assert counts(OVER_ARGS) == {"image.generate": None}
    helper = '''async def orchestrate(ctx, args):
    async def gen(p):
        return await ctx.run("image.generate", {"prompt": p})

    await ctx.parallel([gen(p) for p in ["x", "y"]])
    await gen("z")
    for i in range(4):
        await ctx.run("text.generate", {"prompt": "n"})
    return await ctx.race([gen("r"), gen("s")])
'''
    # A helper called from three places counts on each (2 + 1 + 2); the race is no call.
    assert counts(helper) == {"image.generate": 5, "text.generate": 4}


def test_the_context_holds_the_failed_scripts_counts(failed: Services) -> None:
    context = load_context(failed.store, "lines")
    assert context.required_counts == (CapabilityCalls(
        "image.generate", 3, tuple(context.required)),)
    assert context.required_at_most == 3 and context.required_calls == 3
    assert load_context(failed.store, "loop").required_at_most == 3


# ---- the judge -------------------------------------------------------------------------------


def test_three_literal_calls_folded_into_a_loop_of_three_are_accepted(failed: Services
                                                                      ) -> None:
    verdict = judge(fenced(THREE_IN_A_LOOP), load_context(failed.store, "lines"), attempt=1,
                    capabilities=NAMES)
    assert verdict.refused_by == () and verdict.accepted
    assert (verdict.counted, verdict.calls, verdict.required_calls) == ("calls", 3, 3)
    assert verdict.dropped == () and verdict.short == ()


def test_a_loop_of_three_shrunk_to_one_call_is_refused(failed: Services) -> None:
    context = load_context(failed.store, "loop")
    assert context.required_calls == 1  # one call expression: the old guard saw no loss
    verdict = judge(fenced(ONE_SHOT), context, attempt=1, capabilities=NAMES)
    assert verdict.refused_by == ("call_count",) and not verdict.accepted
    assert (verdict.counted, verdict.calls, verdict.required_calls) == ("calls", 1, 3)
    assert [(s.capability, s.calls, s.required) for s in verdict.short] == [
        ("image.generate", 1, 3)]
    error = verdict.refusals[0]
    assert isinstance(error, CallsDropped)
    assert (error.calls, error.required_calls, error.dropped_lines, error.counted) == (
        1, 3, [4], "calls")
    assert error.short == [{"capability": "image.generate", "calls": 1, "required_calls": 3,
                            "lines": [4]}]
    assert "can make at most 1 image.generate call where the failed script can make 3" \
        in error.message
    assert error_from_json(json.loads(json.dumps(error.to_json()))).fields == error.fields
    # The model is told what is short, with the failed script's line, and that a loop
    # counts by its bound; nothing it wrote is called "dropped".
    message = verdict.message
    assert ("- image.generate: your candidate can make at most 1 call where the failed "
            "script can make 3 (line 4 of the failed script):\n"
            '      image = await ctx.run("image.generate"') in message
    assert "dropped" not in message.lower()


def test_three_literal_calls_reduced_to_one_are_refused_per_capability(failed: Services
                                                                       ) -> None:
    verdict = judge(fenced(ONE_SHOT), load_context(failed.store, "lines"), attempt=1,
                    capabilities=NAMES)
    assert verdict.refused_by == ("call_count",)
    assert [(s.capability, s.calls, s.required, [c.line for c in s.expressions])
            for s in verdict.short] == [("image.generate", 1, 3, [2, 3, 4])]
    assert "(lines 2, 3, 4 of the failed script)" in verdict.refusals[0].message


def test_another_capability_for_the_same_number_of_calls_is_not_refused(failed: Services
                                                                        ) -> None:
    """The guard promises no fewer calls overall (a repair may move work to a capability
    that is granted), so it compares totals; the gate guards each committed call."""
    swapped = THREE_IN_A_LOOP.replace(
        '"image.generate", {"prompt": p, "size": "1024x1024"}',
        '"text.generate", {"prompt": p}').replace('image["artifact"]["id"]', 'image["text"]')
    verdict = judge(fenced(swapped), load_context(failed.store, "lines"), attempt=1,
                    capabilities=NAMES)
    assert verdict.refused_by == () and (verdict.calls, verdict.required_calls) == (3, 3)


def test_without_a_static_bound_the_guard_compares_call_expressions(failed: Services
                                                                    ) -> None:
    # The candidate's loop has no bound (the checker refuses it too): call expressions,
    # as before, and the model is told which count it is and why.
    verdict = judge(fenced(OVER_ARGS), load_context(failed.store, "lines"), attempt=1,
                    capabilities=NAMES)
    assert verdict.refused_by == ("check", "call_count")
    assert (verdict.counted, verdict.calls, verdict.required_calls) == (
        "call expressions", 1, 3)
    assert [c.line for c in verdict.dropped] == [2, 3, 4]  # none has its expression
    error = verdict.refusals[1]
    assert isinstance(error, CallsDropped) and error.counted == "call expressions"
    assert "no static bound" in verdict.message
    assert "line 4 of your candidate" in verdict.message
    # A failed script whose calls have no static bound: the same fallback, and a
    # candidate with as many call expressions is not refused for its count.
    context = load_context(failed.store, "loop")
    unbounded = replace(context, required_counts=tuple(
        replace(c, at_most=None) for c in context.required_counts))
    verdict = judge(fenced(ONE_SHOT), unbounded, attempt=1, capabilities=NAMES)
    assert verdict.refused_by == () and verdict.counted == "call expressions"
    assert (verdict.calls, verdict.required_calls) == (1, 1)


def test_the_prompt_asks_for_as_many_calls_not_call_expressions(failed: Services) -> None:
    from orchestrator.repair_prompt import task_section

    text = task_section(load_context(failed.store, "loop"))
    assert "must be able to make at least 3 capability call(s)" in text
    assert "image.generate: 3 (line 4)" in text


# ---- through `revise repair` -----------------------------------------------------------------


def repair(tmp_path: Path, run_id: str, first: str, answer: str) -> tuple[int, dict]:
    from workers.cli import app

    home = tmp_path / "home"
    services = open_home(home)
    try:
        report = services.pipeline().run(run_id, first, {}, Envelope()).to_json()
    finally:
        services.close()
    assert report["status"] == "failed" and report["calls"]["succeeded"] == 0
    recorded = tmp_path / "model.jsonl"
    recorded.write_text(json.dumps({"purpose": "repair", "output": fenced(answer)}) + "\n")
    result = CliRunner().invoke(
        app, ["repair", "--run-id", run_id, "--model", f"recorded:{recorded}", "--execute",
              "--max-attempts", "1", "--json"],
        env={"REVISE_HOME": str(home), "REVISE_SANDBOX": "process"})
    return result.exit_code, json.loads(result.stdout)


def test_revise_repair_runs_the_loop_that_keeps_all_three_shots(tmp_path: Path) -> None:
    code, data = repair(tmp_path, "c1", THREE_LINES, THREE_IN_A_LOOP)
    assert code == EXIT_OK, data
    assert data["outcome"] == "succeeded" and data["attempts"][0]["errors"] == []
    assert data["attempts"][0]["calls"] == data["attempts"][0]["required_calls"] == 3
    assert data["run"]["calls"]["executed"] == 3


def test_revise_repair_refuses_the_call_that_drops_two_shots(tmp_path: Path) -> None:
    code, data = repair(tmp_path, "c2", LOOP_V1, ONE_SHOT)
    assert code == EXIT_NO_CANDIDATE, data
    assert data["outcome"] == "no_candidate" and data["run"] is None
    error = data["error"]
    assert (error["code"], error["counted"], error["calls"], error["required_calls"]) == (
        "calls_dropped", "calls", 1, 3)
    assert data["attempts"][0]["short"] == [
        {"capability": "image.generate", "calls": 1, "required_calls": 3, "lines": [4]}]

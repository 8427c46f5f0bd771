"""Authoring: skill document + catalog → model → extract → checker; and `revise author`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.catalog import CATALOG
from broker.envelope import Envelope
from broker.errors import InputError
from orchestrator.author import author_messages, author_script
from orchestrator.models import OpenAIChatBackend, RecordedBackend
from orchestrator.skill import CATALOG_MARKER, render_skill, skill_template
from tests.fakes.model_server import FAKE_API_KEY, ModelServer

ROOT = Path(__file__).resolve().parents[2]
GOOD = '''async def orchestrate(ctx, args):
    shots = args["shots"][:4]

    async def gen(shot):
        return await ctx.run("image.generate", {"prompt": shot})

    images = await ctx.parallel([gen(s) for s in shots])
    return [img["artifact"]["id"] for img in images]
'''
BAD = '''import os


async def orchestrate(ctx, args):
    out = []
    for shot in args["shots"]:
        out.append(await ctx.run("image.generate", {"prompt": shot}))
    return out
'''
REQUEST = "four harbour shots, one image each"


def fenced(text: str) -> str:
    return f"Sure! Here it is:\n\n```python\n{text}```\n\nLet me know if you need changes."


def test_the_skill_document_has_one_copy() -> None:
    assert CATALOG_MARKER in skill_template()
    pointer = (ROOT / "docs" / "skill.md").read_text(encoding="utf-8")
    assert "orchestrator/skill.md" in pointer and CATALOG_MARKER in pointer
    assert "## The language" not in pointer  # a pointer, not a second copy


def test_the_skill_document_teaches_the_current_call_path() -> None:
    text = " ".join(skill_template().split())
    for needle in ("take=2", "`take=N` with a literal integer from 1 to 100",
                   "relocated replay", "divergence", "semantic repeat",
                   "only when exactly one call in your script keeps its call expression",
                   "`ambiguous`", "orphan", "The data that reached each committed call",
                   "orchestrate/#0>orchestrate.gen/#0", "spelling a default out is the same "
                   "payload", "round"):
        assert needle in text, needle
    assert "Never move a committed call into a helper" not in text


def test_rendered_skill_lists_the_catalog_from_code() -> None:
    text = render_skill()
    assert CATALOG_MARKER not in text
    for name, cap in CATALOG.items():
        assert f"`{name}`" in text
        for field in cap.input_model.model_fields:
            assert f"`{field}`" in text
    assert "side-effecting" in text and "read-only" in text and "catalog-only" in text
    for primitive in ("ctx.run", "ctx.parallel", "ctx.pipeline", "ctx.dag", "ctx.race",
                      "ctx.log"):
        assert primitive in text
    for rule in (f"R{i:02d}" for i in range(13)):
        assert f"**{rule}" in text


def test_prompt_restricts_the_catalog_to_the_grants() -> None:
    system, user = author_messages(REQUEST, Envelope(grants=["text.generate"]))
    assert "`text.generate`" in system["content"]
    assert "`image.generate`" not in system["content"]
    assert REQUEST in user["content"] and "granted capabilities: text.generate" in \
        user["content"]


def test_valid_script_is_returned_with_a_clean_report() -> None:
    model = RecordedBackend.of(fenced(GOOD), purpose="author")
    result = author_script(REQUEST, model=model, envelope=Envelope())
    assert result.valid and result.script == GOOD
    assert result.report.facts["capability_calls"] == 1
    assert model.calls[0].purpose == "author"


def test_invalid_script_returns_its_violations() -> None:
    result = author_script(REQUEST, model=RecordedBackend.of(fenced(BAD)))
    assert not result.valid
    assert {"R03", "R10"} <= set(result.report.rules())
    data = result.to_json()
    assert data["valid"] is False and all(v["hint"] for v in data["violations"])


def test_ungranted_capability_is_r08() -> None:
    result = author_script(REQUEST, model=RecordedBackend.of(fenced(GOOD)),
                           envelope=Envelope(grants=["text.generate"]))
    assert "R08" in result.report.rules()


def test_violations_are_fed_back_when_more_attempts_are_allowed() -> None:
    model = RecordedBackend.of(fenced(BAD), fenced(GOOD))
    result = author_script(REQUEST, model=model, max_attempts=2)
    assert result.valid and result.attempts == 2
    feedback = model.calls[1].messages[-1]["content"]
    assert "R10" in feedback and "fix:" in feedback
    assert "R10 line 1:" in feedback and "your line 1:\n      import os" in feedback
    assert 'your line 6:\n      for shot in args["shots"]:' in feedback


def test_empty_request_is_an_input_error() -> None:
    with pytest.raises(InputError, match="request is empty"):
        author_script("  ", model=RecordedBackend.of(GOOD))


def test_author_over_http() -> None:
    with ModelServer([fenced(GOOD)]) as server:
        model = OpenAIChatBackend(base_url=server.base_url, model="fake-coder",
                                  api_key=FAKE_API_KEY)
        result = author_script(REQUEST, model=model)
        body = server.bodies()[0]
    assert result.valid
    assert body["messages"][0]["role"] == "system"
    assert "Capability catalog" in body["messages"][0]["content"]


def test_revise_author_cli(tmp_path: Path) -> None:
    from workers.cli import app

    recorded = tmp_path / "author.jsonl"
    recorded.write_text(json.dumps({"purpose": "author", "output": fenced(BAD)}) + "\n"
                        + json.dumps({"purpose": "author", "output": fenced(GOOD)}) + "\n")
    out = tmp_path / "script.py"
    env = {"REVISE_HOME": str(tmp_path)}
    bad = CliRunner().invoke(app, ["author", REQUEST, "--model", f"recorded:{recorded}",
                                   "--json"], env=env)
    assert bad.exit_code == 1
    assert "R10" in {v["rule"] for v in json.loads(bad.stdout)["violations"]}
    # A fresh process replays from the top of the file again; use a GOOD-only file.
    recorded.write_text(json.dumps({"purpose": "author", "output": fenced(GOOD)}) + "\n")
    good = CliRunner().invoke(app, ["author", REQUEST, "--model", f"recorded:{recorded}",
                                    "--out", str(out)], env=env)
    assert good.exit_code == 0, good.output
    assert out.read_text() == GOOD
    assert "valid" in good.stdout


def test_revise_author_never_writes_an_invalid_script_to_out(tmp_path: Path) -> None:
    from workers.cli import app

    recorded = tmp_path / "author.jsonl"
    recorded.write_text(json.dumps({"purpose": "author", "output": fenced(BAD)}) + "\n")
    out = tmp_path / "script.py"
    result = CliRunner().invoke(app, ["author", REQUEST, "--model", f"recorded:{recorded}",
                                      "--out", str(out)],
                           env={"REVISE_HOME": str(tmp_path), "COLUMNS": "400"})
    assert result.exit_code == 1
    assert not out.exists()
    rejected = tmp_path / "script.py.rejected"
    assert rejected.read_text() == BAD
    assert f"wrote it to {rejected}, not to {out}" in result.stdout
    recorded.write_text(json.dumps({"purpose": "author", "output": fenced(BAD)}) + "\n")
    as_json = CliRunner().invoke(app, ["author", REQUEST, "--model", f"recorded:{recorded}",
                                       "--out", str(out), "--json"],
                                 env={"REVISE_HOME": str(tmp_path)})
    assert json.loads(as_json.stdout)["out"] == str(rejected) and not out.exists()


def test_revise_author_endpoint_failure_exit_code(tmp_path: Path) -> None:
    from orchestrator.cli_common import EXIT_MODEL_UNAVAILABLE
    from tests.fakes.openai_server import CHAT, error
    from workers.cli import app

    with ModelServer([]) as server:
        server.queue(CHAT, error(502), error(502))
        result = CliRunner().invoke(app, ["author", REQUEST, "--model", "m", "--json"], env={
            "REVISE_HOME": str(tmp_path), "REVISE_MODEL_BASE_URL": server.base_url,
            "REVISE_MODEL_API_KEY": FAKE_API_KEY, "REVISE_MODEL_RETRIES": "1",
            "REVISE_MODEL_BACKOFF_SECONDS": "0"})
    assert result.exit_code == EXIT_MODEL_UNAVAILABLE, result.output
    assert json.loads(result.stdout)["error"]["code"] == "model_endpoint"

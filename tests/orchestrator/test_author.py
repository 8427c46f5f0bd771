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


def test_skill_document_is_shipped_and_docs_copy_matches() -> None:
    template = skill_template()
    assert CATALOG_MARKER in template
    assert (ROOT / "docs" / "skill.md").read_text(encoding="utf-8") == template, \
        "docs/skill.md drifted: run `python -m orchestrator.skill --sync-docs`"


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
    assert "Never move a\n   committed call into a helper" in text


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
    from orchestrator.cli import app

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

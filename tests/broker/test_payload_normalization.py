"""One request, one payload: NFC everywhere, whitespace in each capability's text fields.

A prompt retyped in another Unicode normal form or with other spacing must have the
same call digest (so it replays instead of being paid again), and the provider must
receive exactly the normalized payload (same digest <=> same request body).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.artifacts import MemoryArtifactStore
from broker.catalog import CATALOG, Capability, ImageGenerateInput, lookup, normalize_text
from broker.envelope import Envelope
from broker.errors import CapabilityDenied, CapabilityError
from broker.identity import call_digest, payload_digest
from broker.providers import CallContext, LocalProvider
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner
from tests.scenarios.conftest import Harness

IMAGE = lookup("image.generate")
TEXT = lookup("text.generate")
REVIEW = lookup("review.visual")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "callpath.md"


def digest(capability: Capability, payload: dict) -> str:
    return call_digest(capability.normalize(payload))


# ---- Unicode: NFC everywhere ----------------------------------------------------------------


def test_nfd_and_nfc_prompts_are_one_payload() -> None:
    composed, decomposed = "a red fox at the caf\u00e9", "a red fox at the cafe\u0301"
    assert composed != decomposed
    assert digest(IMAGE, {"prompt": decomposed}) == digest(IMAGE, {"prompt": composed})
    assert IMAGE.normalize({"prompt": decomposed})["prompt"] == composed
    assert digest(IMAGE, {"prompt": composed}) != digest(IMAGE, {"prompt": "a red fox"})


def test_non_text_strings_are_nfc_too() -> None:
    # NFC is no whitespace rule: a model name in NFD is still the same model name.
    assert TEXT.normalize({"prompt": "p", "model": "mode\u0301le"})["model"] == "mod\u00e9le"


def test_nested_any_fields_are_nfc_keys_included() -> None:
    image = {"cafe\u0301": ["e\u0301", {"n\u0303": "a\u030a"}], "uri": "x://\u212b"}
    normalized = REVIEW.normalize({"image": image})["image"]
    assert normalized == {"caf\u00e9": ["\u00e9", {"\u00f1": "\u00e5"}], "uri": "x://\u00c5"}
    assert digest(REVIEW, {"image": image}) == digest(REVIEW, {"image": normalized})


def test_nested_any_fields_keep_their_whitespace() -> None:
    # Only the named text fields are free text; an image reference is data.
    image = {"uri": "file:///a  b.png ", "note": "x\t\ty"}
    assert REVIEW.normalize({"image": image})["image"] == image


def test_two_keys_that_are_one_key_in_nfc_are_denied_by_name() -> None:
    with pytest.raises(CapabilityDenied, match=re.escape("'image.meta.caf\u00e9'")) as caught:
        REVIEW.normalize({"image": {"meta": {"caf\u00e9": 1, "cafe\u0301": 2}}})
    assert caught.value.fields["field"] == "image.meta.caf\u00e9"


# ---- whitespace in text fields --------------------------------------------------------------


@pytest.mark.parametrize("variant", [
    "  a red fox at the caf\u00e9",
    "a red fox at the caf\u00e9 \n\n",
    "a  red fox\tat the\t\t caf\u00e9",
    "a\u00a0red\u2003fox\u202fat the caf\u00e9",
    "a  red\u00a0fox at the cafe\u0301 \n",
])
def test_spacing_inside_a_line_is_one_payload(variant: str) -> None:
    assert digest(IMAGE, {"prompt": variant}) == digest(IMAGE, {"prompt": "a red fox at the "
                                                                          "caf\u00e9"})


@pytest.mark.parametrize("variant", [
    "first\r\nsecond\r\n\r\nthird",
    "first\rsecond\r\rthird",
    "first   \nsecond\t\n\n\n\n  \n\t\nthird  ",
    "\n\nfirst\nsecond\n \nthird\n\n",
])
def test_line_endings_trailing_spaces_and_blank_runs_are_one_payload(variant: str) -> None:
    assert TEXT.normalize({"prompt": variant})["prompt"] == "first\nsecond\n\nthird"


@pytest.mark.parametrize("other", ["a red\nfox", "a red\n\nfox", "a redfox", "a red fox."])
def test_newlines_blank_lines_and_words_still_count(other: str) -> None:
    assert digest(TEXT, {"prompt": other}) != digest(TEXT, {"prompt": "a red fox"})


def test_every_text_field_of_a_capability_is_normalized() -> None:
    payload = {"prompt": " p  q ", "system": "be\t\tbrief\r\n"}
    assert TEXT.normalize(payload) == {"prompt": "p q", "system": "be brief",
                                            "max_tokens": 256, "model": "local-text-1"}
    styled = IMAGE.normalize({"prompt": "p", "style": "  film   noir "})
    assert styled["style"] == "film noir"
    assert lookup("storyboard.plan").normalize({"brief": " a\t b "})["brief"] == "a b"
    assert REVIEW.normalize({"image": {}, "criteria": " sharp  edges "})["criteria"] == \
        "sharp edges"


def test_absent_and_null_text_fields_stay_as_they_are() -> None:
    assert IMAGE.normalize({"prompt": "p"})["style"] is None
    assert TEXT.normalize({"prompt": "p", "system": None})["system"] is None


def test_whitespace_only_text_is_empty_and_the_provider_still_rejects_it() -> None:
    payload = IMAGE.normalize({"prompt": " \t\r\n "})
    assert payload["prompt"] == ""
    with pytest.raises(CapabilityError, match="prompt"):
        LocalProvider(MemoryArtifactStore()).execute(
            IMAGE, payload, CallContext("run-1", "orchestrate/#0@:0", "revise-test"))


@pytest.mark.parametrize(("field", "value"), [("size", "1024x1024 "),
                                              ("size", " 1024x1024"),
                                              ("model", "local-image-1\t")])
def test_whitespace_in_a_non_text_field_is_its_own_value(field: str, value: str) -> None:
    payload = IMAGE.normalize({"prompt": "a red fox", field: value})
    assert payload[field] == value
    assert call_digest(payload) != digest(IMAGE, {"prompt": "a red fox"})
    # ... and the provider rejects it as before, a paid dispatch attempt.
    with pytest.raises(CapabilityError, match=field):
        LocalProvider(MemoryArtifactStore()).execute(
            IMAGE, payload, CallContext("run-1", "orchestrate/#0@:0", "revise-test"))


# ---- the policy as data ---------------------------------------------------------------------


def test_text_fields_are_string_fields_of_their_input_model() -> None:
    for capability in CATALOG.values():
        fields = capability.input_model.model_fields
        for name in capability.text_fields:
            assert name in fields, (capability.name, name)
            assert "str" in str(fields[name].annotation), (capability.name, name)


def test_a_text_field_the_input_model_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match=r"text_fields \['promt'\] are not fields"):
        Capability(name="x.y", description="", side_effecting=False, production=False,
                   unit_price=0.0, input_model=ImageGenerateInput, provider="dry-run",
                   text_fields=frozenset({"promt"}))


def test_the_docs_table_is_the_catalog() -> None:
    section = DOCS.read_text(encoding="utf-8").split("## Normalized payloads", 1)[1]
    rows = re.findall(r"^\| `([a-z]+\.[a-z]+)` \| (.*) \|$", section, re.MULTILINE)
    documented = {name: frozenset(re.findall(r"`(\w+)`", cells)) for name, cells in rows}
    assert documented == {name: cap.text_fields for name, cap in CATALOG.items()}


# ---- properties -----------------------------------------------------------------------------

_PIECES = st.sampled_from([" ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u2003", "\u3000",
                           "\x0b", "\u2028", "\u0301", "\u0303", "e", "A", "\u00e9", "\u212b",
                           "\u2000", "fox", "."])
texts = st.lists(_PIECES, max_size=30).map("".join) | st.text(max_size=40)


@given(texts, texts)
def test_normalize_is_idempotent(prompt: str, style: str) -> None:
    once = IMAGE.normalize({"prompt": prompt, "style": style})
    assert IMAGE.normalize(once) == once
    assert call_digest(IMAGE.normalize(once)) == call_digest(once)


@given(texts)
def test_normalized_text_is_nfc_and_has_no_spacing_left_to_fold(prompt: str) -> None:
    out = TEXT.normalize({"prompt": prompt})["prompt"]
    assert unicodedata.is_normalized("NFC", out)
    assert out == out.strip() and "\r" not in out and "\n\n\n" not in out
    for line in out.split("\n"):
        assert line == line.rstrip() and not re.search(r"\s\s", line)
        assert re.sub(r"\s", " ", line) == line


@given(texts)
def test_widening_every_space_changes_nothing(prompt: str) -> None:
    widened = re.sub(r"[ \t]", " \t\u00a0", prompt)
    assert normalize_text(widened) == normalize_text(prompt)


# ---- end to end: the embedded pipeline replays the retyped prompt ---------------------------

_SCRIPT = '''async def orchestrate(ctx, args):
    prompt = "{prompt}"
    image = await ctx.run("image.generate", {{"prompt": prompt}})
    {end}
'''


def _script(prompt: str, end: str) -> str:
    """A revision whose prompt is spelled with escapes (the source stays ASCII)."""
    return _SCRIPT.format(prompt=prompt.encode("unicode_escape").decode("ascii"), end=end)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    settings = Settings(home=tmp_path / "home", sandbox=SandboxKind.PROCESS)
    services = open_services(settings, runner=ProcessRunner())
    yield Harness(services)
    services.close()


@pytest.mark.parametrize("retyped", ["a  red\u00a0fox at the caf\u00e9 \n",
                                     "a red fox at the cafe\u0301",
                                     "a\tred fox\u2003at the cafe\u0301\r\n\r\n"])
def test_a_retyped_prompt_replays_the_paid_image(harness: Harness, retyped: str) -> None:
    v1 = _script("  a red fox at the caf\u00e9\t", 'raise RuntimeError("v1 stops here")')
    first = harness.pipeline.run("run-1", v1, {}, Envelope()).to_json()
    assert first["status"] == "failed", first.get("error")
    assert first["calls"]["executed"] == 1
    # The provider received the normalized payload: its digest, and the prompt it echoes.
    sent = IMAGE.normalize({"prompt": "a red fox at the caf\u00e9"})
    assert [(e["capability"], e["digest"]) for e in harness.provider_log()] == [
        ("image.generate", payload_digest(sent))]

    v2 = _script(retyped, 'return [image["prompt"], image["artifact"]["id"]]')
    second = harness.pipeline.run("run-1", v2, {}, Envelope()).to_json()
    assert second["status"] == "succeeded", second.get("error")
    assert (second["calls"]["replayed"], second["calls"]["executed"]) == (1, 0)
    assert second["result"][0] == "a red fox at the caf\u00e9"
    assert len(harness.provider_log()) == 1

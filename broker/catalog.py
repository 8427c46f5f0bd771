"""The capability catalog: what a script may ask for, as data.

Schemas check structure (types, required fields, unknown fields) before
dispatch; value-level validation (supported sizes, known models, non-empty
prompts) is the provider's, as with real image and text APIs, so a rejected
value is a paid dispatch attempt exactly as it would be in production.

Normalization makes one request one payload: every string is NFC, and the free
text fields a capability names (``text_fields``) have their whitespace
normalized (``normalize_text``), so a prompt retyped in another Unicode form or
with other spacing has the same digest, replays, and reaches the provider as the
same request body.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from broker.charging import ProviderTerms
from broker.errors import CapabilityDenied, InputError


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImageGenerateInput(_Input):
    prompt: str
    size: str = "1024x1024"
    model: str = "local-image-1"
    seed: int | None = None
    style: str | None = None


class StoryboardPlanInput(_Input):
    brief: str
    shots: int = Field(default=4, ge=1, le=64)
    model: str = "local-text-1"


class ReviewVisualInput(_Input):
    image: Any
    criteria: str = "matches the prompt"
    model: str = "local-text-1"


class TextGenerateInput(_Input):
    prompt: str
    system: str | None = None
    max_tokens: int = Field(default=256, ge=1, le=8192)
    model: str = "local-text-1"


class VideoGenerateInput(_Input):
    prompt: str
    duration_seconds: float = Field(default=5.0, gt=0, le=60)
    image: Any = None


class VideoEditInput(_Input):
    video: Any
    instruction: str


class ImageEditInput(_Input):
    image: Any
    instruction: str
    size: str = "1024x1024"


class ImageUpscaleInput(_Input):
    image: Any
    factor: int = Field(default=2, ge=2, le=4)


class AudioGenerateInput(_Input):
    text: str
    voice: str = "neutral"


# ---- normalization: one request, one payload ----------------------------------------------

_SPACE_RUN = re.compile(r"\s+")  # within one line: spaces, tabs, Unicode Zs


def normalize_text(text: str) -> str:
    """Free text with its whitespace normalized (idempotent).

    Line boundaries (``\\r\\n``, ``\\r`` and the others ``str.splitlines`` knows)
    become ``\\n``; each run of whitespace inside a line becomes one space and a
    line's trailing whitespace goes; a run of blank lines becomes one blank line;
    the text's leading and trailing whitespace goes.
    """
    lines = [_SPACE_RUN.sub(" ", line).rstrip() for line in text.splitlines()]
    kept = [line for i, line in enumerate(lines) if line or (i > 0 and lines[i - 1])]
    return "\n".join(kept).strip()


def nfc(value: Any, *, capability: str, where: str = "") -> Any:
    """``value`` with every string in it, dict keys included, in Unicode NFC.

    Raises CapabilityDenied when two keys of one object are the same key in NFC
    (the payload would otherwise silently lose one of them).
    """
    if isinstance(value, str):
        return unicodedata.normalize("NFC", value)
    if isinstance(value, list):
        return [nfc(item, capability=capability, where=f"{where}[{i}]")
                for i, item in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = unicodedata.normalize("NFC", key) if isinstance(key, str) else key
            field = f"{where}.{name}" if where else str(name)
            if name in out:
                raise CapabilityDenied(
                    f"{capability} payload field {field!r} is given twice, in two Unicode "
                    "forms of one key (NFC and another); keep one of them",
                    capability=capability, field=field)
            out[name] = nfc(item, capability=capability, where=field)
        return out
    return value


# ---- results: what a provider hands back (checked where an operator supplies one) ---------


class _Result(BaseModel):
    """Providers may add fields; the ones named here must be present and well-typed."""

    model_config = ConfigDict(extra="allow", frozen=True)


class ArtifactField(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    media_type: str = Field(min_length=1)
    bytes: int = Field(ge=0)
    uri: str | None = None


class AnyResult(_Result):
    """Catalog-only (dry-run) capabilities: any object; an artifact, if any, is checked."""

    artifact: ArtifactField | None = None


class ImageResult(_Result):
    artifact: ArtifactField
    width: int = Field(gt=0)
    height: int = Field(gt=0)


class StoryboardPlanResult(_Result):
    shots: list[str]


class ReviewVisualResult(_Result):
    verdict: Literal["pass", "fail"]
    score: float
    notes: str = ""


class TextGenerateResult(_Result):
    text: str


class Capability(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    side_effecting: bool
    production: bool
    unit_price: float
    input_model: type[_Input]
    provider: str
    result_model: type[_Result] = AnyResult
    # Payload fields that carry a secret (a token, a signed URL): never shown to a model or
    # printed in a report; the digest still covers them.
    secret_fields: frozenset[str] = frozenset()
    # Free-text payload fields whose whitespace is normalized (``normalize_text``); every
    # other field keeps its spacing (a size or model with a stray space is its own value).
    text_fields: frozenset[str] = frozenset()

    @model_validator(mode="after")
    def _fields_exist(self) -> Capability:
        for kind in ("secret_fields", "text_fields"):
            unknown = sorted(getattr(self, kind) - set(self.input_model.model_fields))
            if unknown:
                raise ValueError(f"{self.name} {kind} {unknown} are not fields of "
                                 f"{self.input_model.__name__}; name its fields")
        return self

    @property
    def terms(self) -> ProviderTerms:
        return PROVIDER_TERMS[self.provider]

    def redact(self, payload: Any) -> Any:
        """``payload`` with every secret field's value replaced by ``"<secret>"``."""
        if not isinstance(payload, dict) or not self.secret_fields:
            return payload
        return {k: "<secret>" if k in self.secret_fields else v for k, v in payload.items()}

    def normalize(self, payload: Any) -> dict[str, Any]:
        """The payload as the schema reads it, defaults filled in, every string NFC and
        the text fields' whitespace normalized: the digest's input and the request the
        provider receives. Idempotent.

        Raises CapabilityDenied naming the offending field.
        """
        if not isinstance(payload, dict):
            raise CapabilityDenied(
                f"{self.name} takes a JSON object payload, got {type(payload).__name__}; "
                "pass a dict literal such as {\"prompt\": ...}", capability=self.name)
        try:
            model = self.input_model.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(payload)"
            allowed = ", ".join(self.input_model.model_fields)
            raise CapabilityDenied(
                f"{self.name} payload field {field!r}: {first['msg']}; "
                f"fields of {self.name} are: {allowed}", capability=self.name,
                field=field) from None
        dumped: dict[str, Any] = nfc(model.model_dump(mode="json"), capability=self.name)
        for name in self.text_fields:
            if isinstance(dumped.get(name), str):
                dumped[name] = normalize_text(dumped[name])
        return dumped

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()

    def check_result(self, result: Any) -> None:
        """Raise InputError naming the field when ``result`` is not this capability's result
        shape (an operator's write-back of a call whose worker died)."""
        if not isinstance(result, dict):
            raise InputError(f"a {self.name} result is a JSON object, got "
                             f"{type(result).__name__}", capability=self.name)
        try:
            self.result_model.model_validate(result)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(result)'}: {e['msg']}"
                for e in exc.errors()[:5])
            raise InputError(f"not a {self.name} result: {problems}. Expected fields: "
                             f"{', '.join(self.result_model.model_fields) or 'any'}",
                             capability=self.name) from None


# Per provider kind: does a failed request cost money, does the provider deduplicate by
# Idempotency-Key? Image and text APIs may charge for work they then fail to deliver;
# whether a deployment's provider honours keys is its operator's word
# (``REVISE_PROVIDER_HONOURS_IDEMPOTENCY_KEY``, see ``Settings``).
PROVIDER_TERMS: dict[str, ProviderTerms] = {
    "images": ProviderTerms(honours_idempotency_key=False, charges_on_failure=True),
    "text": ProviderTerms(honours_idempotency_key=False, charges_on_failure=True),
    "dry-run": ProviderTerms(honours_idempotency_key=False, charges_on_failure=False),
}


def _cap(name, description, *, side_effecting, production, price, model, provider,
         result=AnyResult, text=()):
    return Capability(name=name, description=description, side_effecting=side_effecting,
                      production=production, unit_price=price, input_model=model,
                      provider=provider, result_model=result, text_fields=frozenset(text))


CATALOG: dict[str, Capability] = {
    cap.name: cap
    for cap in (
        _cap("image.generate", "Generate one image from a prompt (paid).",
             side_effecting=True, production=True, price=0.02, model=ImageGenerateInput,
             provider="images", result=ImageResult,
             text=("prompt", "style")),
        _cap("storyboard.plan", "Plan a storyboard: a list of shot descriptions.",
             side_effecting=False, production=True, price=0.002, model=StoryboardPlanInput,
             provider="text", result=StoryboardPlanResult, text=("brief",)),
        _cap("review.visual", "Review an image against criteria; returns a verdict.",
             side_effecting=False, production=True, price=0.002, model=ReviewVisualInput,
             provider="text", result=ReviewVisualResult, text=("criteria",)),
        _cap("text.generate", "Generate text from a prompt.",
             side_effecting=False, production=True, price=0.001, model=TextGenerateInput,
             provider="text", result=TextGenerateResult,
             text=("prompt", "system")),
        _cap("video.generate", "Generate a video clip (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.50, model=VideoGenerateInput,
             provider="dry-run", text=("prompt",)),
        _cap("video.edit", "Edit a video clip (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.60, model=VideoEditInput,
             provider="dry-run", text=("instruction",)),
        _cap("image.edit", "Edit an image with an instruction (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.04, model=ImageEditInput,
             provider="dry-run", text=("instruction",)),
        _cap("image.upscale", "Upscale an image (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.02, model=ImageUpscaleInput,
             provider="dry-run"),
        _cap("audio.generate", "Speak text as audio (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.05, model=AudioGenerateInput,
             provider="dry-run", text=("text",)),
    )
}

CAPABILITY_NAMES: frozenset[str] = frozenset(CATALOG)
PRODUCTION_CAPABILITIES: frozenset[str] = frozenset(
    name for name, cap in CATALOG.items() if cap.production)


def lookup(name: str) -> Capability:
    try:
        return CATALOG[name]
    except KeyError:
        known = ", ".join(sorted(CATALOG))
        raise CapabilityDenied(f"unknown capability {name!r}; the catalog has: {known}",
                               capability=name) from None

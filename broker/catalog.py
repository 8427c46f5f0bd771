"""The capability catalog: what a script may ask for, as data.

Schemas check structure (types, required fields, unknown fields) before
dispatch; value-level validation (supported sizes, known models, non-empty
prompts) is the provider's, as with real image and text APIs, so a rejected
value is a paid dispatch attempt exactly as it would be in production.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from broker.errors import CapabilityDenied


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


class Capability(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    side_effecting: bool
    production: bool
    unit_price: float
    input_model: type[_Input]
    provider: str
    # Payload fields that carry a secret (a token, a signed URL): never shown to a model or
    # printed in a report; the digest still covers them.
    secret_fields: frozenset[str] = frozenset()

    def redact(self, payload: Any) -> Any:
        """``payload`` with every secret field's value replaced by ``"<secret>"``."""
        if not isinstance(payload, dict) or not self.secret_fields:
            return payload
        return {k: "<secret>" if k in self.secret_fields else v for k, v in payload.items()}

    def normalize(self, payload: Any) -> dict[str, Any]:
        """The payload as the schema reads it, defaults filled in (the digest's input).

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
        return model.model_dump(mode="json")

    def validate_payload(self, payload: Any) -> dict[str, Any]:
        """Structural check only; returns the payload as given."""
        self.normalize(payload)
        return payload

    def input_schema(self) -> dict[str, Any]:
        return self.input_model.model_json_schema()


def _cap(name, description, *, side_effecting, production, price, model, provider):
    return Capability(name=name, description=description, side_effecting=side_effecting,
                      production=production, unit_price=price, input_model=model,
                      provider=provider)


CATALOG: dict[str, Capability] = {
    cap.name: cap
    for cap in (
        _cap("image.generate", "Generate one image from a prompt (paid).",
             side_effecting=True, production=True, price=0.02, model=ImageGenerateInput,
             provider="images"),
        _cap("storyboard.plan", "Plan a storyboard: a list of shot descriptions.",
             side_effecting=False, production=True, price=0.002, model=StoryboardPlanInput,
             provider="text"),
        _cap("review.visual", "Review an image against criteria; returns a verdict.",
             side_effecting=False, production=True, price=0.002, model=ReviewVisualInput,
             provider="text"),
        _cap("text.generate", "Generate text from a prompt.",
             side_effecting=False, production=True, price=0.001, model=TextGenerateInput,
             provider="text"),
        _cap("video.generate", "Generate a video clip (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.50, model=VideoGenerateInput,
             provider="dry-run"),
        _cap("video.edit", "Edit a video clip (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.60, model=VideoEditInput,
             provider="dry-run"),
        _cap("image.edit", "Edit an image with an instruction (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.04, model=ImageEditInput,
             provider="dry-run"),
        _cap("image.upscale", "Upscale an image (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.02, model=ImageUpscaleInput,
             provider="dry-run"),
        _cap("audio.generate", "Speak text as audio (catalog-only: dry-run).",
             side_effecting=True, production=False, price=0.05, model=AudioGenerateInput,
             provider="dry-run"),
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

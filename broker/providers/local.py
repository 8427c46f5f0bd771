"""The local provider: deterministic stand-ins for the image and text APIs.

Same payload, same result, same PNG bytes, so replay and repair can be tested
byte for byte without a network. Values are validated the way real APIs do
(empty prompt, unsupported size, unknown model), and a rejection is a
``CapabilityError`` with the status and code a real API would return: it
counts as a dispatch attempt, as it would in production.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError

from broker import png
from broker.artifacts import ArtifactStore
from broker.catalog import Capability
from broker.errors import CapabilityError
from broker.identity import canonical_json, payload_digest, sha256_hex
from broker.providers.base import CallContext, ProviderResult, provider_error

SUPPORTED_SIZES: tuple[str, ...] = ("256x256", "512x512", "1024x1024", "1024x1536",
                                    "1536x1024")
IMAGE_MODELS: frozenset[str] = frozenset({"local-image-1"})
TEXT_MODELS: frozenset[str] = frozenset({"local-text-1"})
# The stored PNG is a preview with the requested aspect: one pixel per 16 requested.
PREVIEW_DIVISOR = 16

Latency = float | Callable[[str, dict], float]

_FRAMINGS = ("wide establishing shot", "medium shot", "close-up", "over-the-shoulder shot",
             "low-angle shot", "tracking shot", "aerial view", "detail insert")
_MOODS = ("soft morning light", "high contrast", "muted palette", "warm dusk glow",
          "cool overcast tones", "neon night")
_WORDS = ("the", "scene", "shows", "a", "quiet", "moment", "with", "clear", "light", "and",
          "steady", "focus", "on", "detail", "story", "colour", "motion", "frame")


def _hash_int(*parts: Any) -> int:
    return int(sha256_hex(canonical_json(list(parts)))[:12], 16)


class LocalProvider:
    """Answers images/text capabilities deterministically; see module docstring."""

    name = "local"
    sends_idempotency_key = False

    def __init__(self, artifacts: ArtifactStore, *, latency: Latency = 0.0) -> None:
        self.artifacts = artifacts
        self.latency = latency
        self._handlers: dict[str, Callable[[Capability, Any, CallContext], ProviderResult]] = {
            "image.generate": self._image_generate,
            "storyboard.plan": self._storyboard_plan,
            "review.visual": self._review_visual,
            "text.generate": self._text_generate,
        }

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        self._sleep(capability, payload)
        handler = self._handlers.get(capability.name)
        if handler is None:
            raise provider_error(capability, call,
                                 f"the local provider does not serve {capability.name}; "
                                 f"it serves: {', '.join(sorted(self._handlers))}",
                                 status=400, provider_code="unsupported_capability")
        return handler(capability, self._parse(capability, payload, call), call)

    # ---- plumbing ------------------------------------------------------------------------

    def _sleep(self, capability: Capability, payload: dict) -> None:
        delay = self.latency(capability.name, payload) if callable(self.latency) else self.latency
        if delay and delay > 0:
            time.sleep(delay)

    @staticmethod
    def _parse(capability: Capability, payload: dict, call: CallContext) -> BaseModel:
        try:
            return capability.input_model.model_validate(payload)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(p) for p in first["loc"]) or "(payload)"
            raise _invalid(capability, call, field, first["msg"]) from None

    @staticmethod
    def _check_model(capability: Capability, call: CallContext, model: str,
                     known: frozenset[str]) -> None:
        if model not in known:
            raise provider_error(capability, call,
                                 f"model {model!r} does not exist; available models: "
                                 f"{', '.join(sorted(known))}",
                                 status=404, provider_code="model_not_found") from None

    @staticmethod
    def _check_text(capability: Capability, call: CallContext, field: str, value: str) -> None:
        if not value.strip():
            raise _invalid(capability, call, field, "must be a non-empty string")

    # ---- capabilities --------------------------------------------------------------------

    def _image_generate(self, capability: Capability, params: Any,
                        call: CallContext) -> ProviderResult:
        self._check_model(capability, call, params.model, IMAGE_MODELS)
        self._check_text(capability, call, "prompt", params.prompt)
        if params.size not in SUPPORTED_SIZES:
            raise _invalid(capability, call, "size",
                           f"{params.size!r} is not supported; use one of "
                           f"{', '.join(SUPPORTED_SIZES)}")
        width, height = (int(side) for side in params.size.split("x"))
        seed = params.seed if params.seed is not None else _hash_int(
            "seed", params.prompt, params.size, params.model, params.style) % 2**31
        data = png.render(canonical_json([params.prompt, params.size, params.model, seed,
                                          params.style]).encode(),
                          width // PREVIEW_DIVISOR, height // PREVIEW_DIVISOR)
        ref = self.artifacts.put(data, png.MEDIA_TYPE)
        result = {"artifact": ref.to_json(), "width": width, "height": height,
                  "size": params.size, "model": params.model, "seed": seed,
                  "prompt": params.prompt}
        return ProviderResult(result=result, usage={"images": 1}, cost=capability.unit_price)

    def _storyboard_plan(self, capability: Capability, params: Any,
                         call: CallContext) -> ProviderResult:
        self._check_model(capability, call, params.model, TEXT_MODELS)
        self._check_text(capability, call, "brief", params.brief)
        brief = " ".join(params.brief.split())
        shots = []
        for i in range(params.shots):
            pick = _hash_int("shot", brief, i)
            shots.append(f"Shot {i + 1}: {_FRAMINGS[pick % len(_FRAMINGS)]} of {brief}, "
                         f"{_MOODS[(pick // 7) % len(_MOODS)]}")
        return ProviderResult(result={"shots": shots},
                              usage=_tokens(brief, " ".join(shots)), cost=capability.unit_price)

    def _review_visual(self, capability: Capability, params: Any,
                       call: CallContext) -> ProviderResult:
        self._check_model(capability, call, params.model, TEXT_MODELS)
        self._check_text(capability, call, "criteria", params.criteria)
        pick = int(payload_digest(params.model_dump(mode="json"))[:8], 16)
        passed = pick % 5 != 0  # about four in five reviews pass
        score = round((0.7 if passed else 0.2) + (pick % 29) / 100, 2)
        notes = (f"meets the criteria: {params.criteria}" if passed
                 else f"does not meet the criteria: {params.criteria}")
        result = {"verdict": "pass" if passed else "fail", "score": score, "notes": notes}
        return ProviderResult(result=result, usage=_tokens(params.criteria, notes),
                              cost=capability.unit_price)

    def _text_generate(self, capability: Capability, params: Any,
                       call: CallContext) -> ProviderResult:
        self._check_model(capability, call, params.model, TEXT_MODELS)
        self._check_text(capability, call, "prompt", params.prompt)
        prompt = " ".join(params.prompt.split())
        count = min(params.max_tokens, 12 + _hash_int("len", prompt, params.system) % 24)
        words = [_WORDS[_hash_int("w", prompt, params.system, i) % len(_WORDS)]
                 for i in range(count)]
        text = " ".join(words).capitalize() + "."
        return ProviderResult(result={"text": text},
                              usage=_tokens(f"{params.system or ''} {prompt}", text),
                              cost=capability.unit_price)


def _invalid(capability: Capability, call: CallContext, field: str,
             detail: str) -> CapabilityError:
    return provider_error(capability, call,
                          f"invalid parameter {field!r} for {capability.name}: {detail}",
                          status=400, provider_code="invalid_parameter", field=field)


def _tokens(prompt: str, completion: str) -> dict[str, int]:
    return {"prompt_tokens": len(prompt.split()), "completion_tokens": len(completion.split())}

"""The ``--model`` spec that picks a backend."""

from __future__ import annotations

from pathlib import Path

from broker.errors import ConfigError
from broker.settings import Settings
from orchestrator.models.base import ModelBackend
from orchestrator.models.openai_chat import OpenAIChatBackend
from orchestrator.models.recorded import RecordedBackend

RECORDED_PREFIX = "recorded:"


def backend_from_spec(spec: str, settings: Settings | None = None) -> ModelBackend:
    """``recorded:PATH.jsonl`` replays a file; anything else is a model name served by the
    OpenAI-compatible endpoint at REVISE_MODEL_BASE_URL (key: REVISE_MODEL_API_KEY)."""
    spec = spec.strip()
    if not spec:
        raise ConfigError("--model is empty; pass a model name (served by "
                          "REVISE_MODEL_BASE_URL) or recorded:PATH.jsonl")
    if spec.startswith(RECORDED_PREFIX):
        return RecordedBackend.load(Path(spec.removeprefix(RECORDED_PREFIX)))
    return OpenAIChatBackend.from_settings(settings or Settings(), model=spec)

"""The model backend interface and the ``--model`` spec that picks one.

A backend turns chat messages into one text answer. ``purpose`` says what the
answer is for (``"repair"`` or ``"author"``): the recorded backend replays by
it, the HTTP backend only logs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from broker.errors import ConfigError, ReviseError
from broker.settings import Settings

PURPOSES = frozenset({"repair", "author"})
RECORDED_PREFIX = "recorded:"

Message = dict[str, str]


class ModelEndpointError(ReviseError):
    """The model endpoint gave no usable answer (down, rate limited, timed out, malformed
    answers) after the configured retries; nothing was judged. A wrong key, model name or
    base URL is a ``ConfigError`` instead."""

    code = "model_endpoint"


@runtime_checkable
class ModelBackend(Protocol):
    @property
    def name(self) -> str:
        """What the operator knows the model by (shown in progress lines and reports)."""
        ...

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        """The model's answer to ``messages`` (OpenAI chat format: role + content)."""
        ...


def backend_from_spec(spec: str, settings: Settings | None = None) -> ModelBackend:
    """``recorded:PATH.jsonl`` replays a file; anything else is a model name served by the
    OpenAI-compatible endpoint at REVISE_MODEL_BASE_URL (key: REVISE_MODEL_API_KEY)."""
    from orchestrator.models.openai_chat import OpenAIChatBackend
    from orchestrator.models.recorded import RecordedBackend

    spec = spec.strip()
    if not spec:
        raise ConfigError("--model is empty; pass a model name (served by "
                          "REVISE_MODEL_BASE_URL) or recorded:PATH.jsonl")
    if spec.startswith(RECORDED_PREFIX):
        return RecordedBackend.load(Path(spec.removeprefix(RECORDED_PREFIX)))
    return OpenAIChatBackend.from_settings(settings or Settings(), model=spec)

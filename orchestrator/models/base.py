"""The model backend interface.

A backend turns chat messages into one text answer. ``purpose`` says what the
answer is for (``"repair"`` or ``"author"``): the recorded backend replays by
it, the HTTP backend only logs it.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from broker.errors import ReviseError

PURPOSES = frozenset({"repair", "author"})

Message = dict[str, str]


class ModelEndpointError(ReviseError):
    """The model endpoint gave no usable answer (down, rate limited, timed out, malformed
    answers) after the configured retries; nothing was judged. A wrong key, model name or
    base URL is a ``ConfigError`` instead."""

    code = "model_endpoint"
    reason: str | None = None  # rejected | empty | http | timeout | malformed | ...
    status: int | None = None  # the last HTTP status, when one came
    attempts: int | None = None  # requests made before giving up


@runtime_checkable
class ModelBackend(Protocol):
    @property
    def name(self) -> str:
        """What the operator knows the model by (shown in progress lines and reports)."""
        ...

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        """The model's answer to ``messages`` (OpenAI chat format: role + content)."""
        ...

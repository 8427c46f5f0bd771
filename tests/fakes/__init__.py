"""Reusable fakes that speak real protocols (HTTP on 127.0.0.1)."""

from tests.fakes.openai_server import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    error,
    fake_openai,
    invalid_size,
    ok_chat,
    ok_image,
    running_server,
    slow,
    unknown_model,
)

__all__ = [
    "CHAT",
    "FAKE_API_KEY",
    "IMAGES",
    "FakeOpenAIServer",
    "RecordedRequest",
    "Reply",
    "error",
    "fake_openai",
    "invalid_size",
    "ok_chat",
    "ok_image",
    "running_server",
    "slow",
    "unknown_model",
]

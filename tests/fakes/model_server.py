"""A real OpenAI-compatible chat-completions server that answers with scripted candidates.

Built on ``FakeOpenAIServer`` (real HTTP on 127.0.0.1, ephemeral port, every
request recorded). Each chat request that is not consumed by a queued
behaviour (``server.queue(CHAT, error(429))``) gets the next scripted
candidate; when they run out the server answers 400 so a test that asks too
often fails loudly.

    with ModelServer(["```python\\n...```", "..."]) as server:
        backend = OpenAIChatBackend(base_url=server.base_url, model="m", api_key=KEY)
        ...
        server.prompts()[1]   # the last user message of the second request
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from tests.fakes.openai_server import (
    FAKE_API_KEY,
    Behaviour,
    FakeOpenAIServer,
    RecordedRequest,
    Reply,
    error,
    ok_chat,
    refused_parameter,
)

__all__ = ["FAKE_API_KEY", "ModelServer"]


class ModelServer(FakeOpenAIServer):
    def __init__(self, candidates: Iterable[str] = (), *, api_key: str | None = FAKE_API_KEY,
                 prefix: str = "/v1", key_header: str = "Authorization") -> None:
        super().__init__(api_key=api_key, prefix=prefix, key_header=key_header)
        self._candidates: deque[str] = deque(candidates)
        self._served = 0
        self._candidate_lock = threading.Lock()

    def add(self, *candidates: str) -> None:
        with self._candidate_lock:
            self._candidates.extend(candidates)

    @property
    def served(self) -> int:
        return self._served

    def default_behaviour(self, path: str) -> Behaviour:
        if path != f"{self.prefix}/chat/completions":
            return super().default_behaviour(path)
        return self._next_candidate

    def _next_candidate(self, request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        refused = refused_parameter(request, server)
        if refused is not None:
            return refused
        with self._candidate_lock:
            if not self._candidates:
                return error(400, "the scripted model has no candidate left")(request, server)
            content = self._candidates.popleft()
            self._served += 1
        return ok_chat(content)(request, server)

    # ---- what the client sent -------------------------------------------------------------

    def chat_requests(self) -> list[RecordedRequest]:
        return self.requests_to(f"{self.prefix}/chat/completions")

    def bodies(self) -> list[Any]:
        return [r.body for r in self.chat_requests()]

    def prompts(self) -> list[str]:
        """The last user message of every chat request, in arrival order."""
        out = []
        for body in self.bodies():
            users = [m for m in body.get("messages", []) if m.get("role") == "user"]
            out.append(users[-1]["content"] if users else "")
        return out

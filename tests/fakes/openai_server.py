"""A real OpenAI-compatible HTTP server on 127.0.0.1 for adapter tests.

``FakeOpenAIServer`` listens on an ephemeral port in a background thread and
records every request (method, path, lower-cased headers, JSON body). Each
endpoint answers realistically by default (a base64 PNG for images, a chat
completion that echoes the prompt, provider-style 400/404 for bad values);
tests queue one-shot behaviours per endpoint to script failures:

    with FakeOpenAIServer(api_key="sk-test") as server:
        server.queue(IMAGES, error(429), slow(2.0))
        ... client calls server.base_url ...
        assert server.requests[0].headers["idempotency-key"] == ...
"""

from __future__ import annotations

import base64
import json
import threading
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from broker import png

IMAGES = "/v1/images/generations"
CHAT = "/v1/chat/completions"
SUPPORTED_SIZES = ("256x256", "512x512", "1024x1024", "1024x1536", "1536x1024")
UNKNOWN_MODEL_PREFIX = "missing-"
FAKE_API_KEY = "sk-fake-0123456789abcdef"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    raw: bytes | None = None  # sent as is instead of json.dumps(body)
    trickle: float = 0.0  # seconds between 16-byte pieces of the body


Behaviour = Callable[[RecordedRequest, "FakeOpenAIServer"], Reply]


def _error_body(message: str, kind: str, param: str | None = None,
                code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


# ---- behaviours --------------------------------------------------------------------------------

def ok_image(data: bytes | None = None) -> Behaviour:
    """Answer with a b64 PNG (derived from the prompt unless ``data`` is given)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        image = data if data is not None else png.render(
            str(request.body.get("prompt", "")).encode(), 8)
        return Reply(200, {"created": 0,
                           "data": [{"b64_json": base64.b64encode(image).decode("ascii")}]})
    return behave


def ok_chat(content: str | None = None, *, prompt_tokens: int = 7,
            completion_tokens: int = 5) -> Behaviour:
    """Answer with a chat completion (echoing the last user message unless ``content``)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = content
        if reply is None:
            messages = request.body.get("messages") or [{}]
            reply = f"echo: {messages[-1].get('content')}"
        return Reply(200, {"id": "chatcmpl-fake", "object": "chat.completion",
                           "model": request.body.get("model"),
                           "choices": [{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": reply}}],
                           "usage": {"prompt_tokens": prompt_tokens,
                                     "completion_tokens": completion_tokens}})
    return behave


def error(status: int, message: str = "", *, param: str | None = None,
          headers: dict[str, str] | None = None) -> Behaviour:
    """Answer with an OpenAI-style error body."""
    kinds = {400: "invalid_request_error", 401: "authentication_error",
             403: "permission_error", 404: "invalid_request_error", 429: "rate_limit_error"}

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(status, _error_body(message or f"fake error {status}",
                                         kinds.get(status, "server_error"), param),
                     headers=dict(headers or {}))
    return behave


def truncated_chat(content: str = "```python\nasync def orchestrate(ctx, args):\n```") -> Behaviour:
    """A chat completion cut off halfway (a proxy that dropped the end of the answer)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        whole = json.dumps(ok_chat(content)(request, server).body).encode()
        return Reply(200, None, raw=whole[:len(whole) // 2])
    return behave


def html_page() -> Behaviour:
    """A web page where the API should be (a base URL without the /v1 prefix)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(200, None, headers={"Content-Type": "text/html"},
                     raw=b"<!doctype html><html><body>Welcome</body></html>")
    return behave


def trickle(seconds: float, content: str = "slow answer") -> Behaviour:
    """A complete answer sent in 16-byte pieces, ``seconds`` apart."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = ok_chat(content)(request, server)
        reply.trickle = seconds
        return reply
    return behave


def invalid_size() -> Behaviour:
    return error(400, "Invalid value for 'size': must be one of 256x256, 512x512, 1024x1024",
                 param="size")


def unknown_model() -> Behaviour:
    return error(404, "The model does not exist or you do not have access to it.",
                 param="model")


def slow(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Wait ``seconds`` before answering (with ``then``, else the default)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = (then or server.default_behaviour(request.path))(request, server)
        reply.delay = seconds
        return reply
    return behave


# ---- defaults: validate like the real API -------------------------------------------------------

def _default_images(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
    body = request.body if isinstance(request.body, dict) else {}
    if str(body.get("model", "")).startswith(UNKNOWN_MODEL_PREFIX):
        return unknown_model()(request, server)
    if body.get("size") not in SUPPORTED_SIZES:
        return invalid_size()(request, server)
    if not str(body.get("prompt", "")).strip():
        return error(400, "prompt must not be empty", param="prompt")(request, server)
    return ok_image()(request, server)


def _default_chat(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
    body = request.body if isinstance(request.body, dict) else {}
    if str(body.get("model", "")).startswith(UNKNOWN_MODEL_PREFIX):
        return unknown_model()(request, server)
    return ok_chat()(request, server)


# ---- server --------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest("POST", self.path,
                                  {k.lower(): v for k, v in self.headers.items()}, body)
        reply = self.server.fake.handle(request)
        if reply.delay and self.server.fake.stopping.wait(reply.delay):
            return  # shutting down: drop the connection like a dying upstream
        payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            if "Content-Type" not in reply.headers:
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            if not reply.trickle:
                self.wfile.write(payload)
                return
            for start in range(0, len(payload), 16):
                self.wfile.write(payload[start:start + 16])
                self.wfile.flush()
                if self.server.fake.stopping.wait(reply.trickle):
                    return
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (timeout test); nothing to answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    fake: FakeOpenAIServer


class FakeOpenAIServer:
    def __init__(self, *, api_key: str | None = None, prefix: str = "/v1") -> None:
        self.api_key = api_key
        self.prefix = prefix
        self.requests: list[RecordedRequest] = []
        self.stopping = threading.Event()
        self._queues: dict[str, deque[Behaviour]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the fake server is not running; use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}{self.prefix}"

    def queue(self, path: str, *behaviours: Behaviour) -> None:
        """Answer the next requests to ``path`` with ``behaviours``, in order, once each."""
        with self._lock:
            self._queues[path].extend(behaviours)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def default_behaviour(self, path: str) -> Behaviour:
        if path == f"{self.prefix}/images/generations":
            return _default_images
        if path == f"{self.prefix}/chat/completions":
            return _default_chat
        return error(404, f"unknown path {path}")

    def handle(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            queued = self._queues[request.path]
            behaviour = queued.popleft() if queued else None
        if self.api_key is not None and \
                request.headers.get("authorization") != f"Bearer {self.api_key}":
            return error(401, "Incorrect API key provided.")(request, self)
        return (behaviour or self.default_behaviour(request.path))(request, self)

    def start(self) -> FakeOpenAIServer:
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.fake = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_server(**kwargs: Any) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(**kwargs) as server:
        yield server


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """Pytest fixture: ``from tests.fakes import fake_openai`` in a test module or conftest."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        yield server

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

It also models a real provider's money. ``server.charges`` records every time
the fake did the work (a 200 answer; ``charge_then_error`` and
``complete_late``, which do the work and then fail or answer late). With
``idempotency="honour"`` a request whose ``Idempotency-Key`` already completed
with the same body gets the stored answer free, the same key with another body
422, and a key whose first request is still running 409; ``"ignore"`` (the
default) does every request again. ``GET /v1/requests/{key}`` looks a key up
(honouring only), so a client can resolve an unknown outcome later:

    with FakeOpenAIServer(idempotency="honour") as server:
        server.queue(IMAGES, charge_then_error(500))
        ... the client's retry under the same key is answered from the store ...
        assert server.charged("fox") == 1
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import unquote

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
    at: float = field(default_factory=time.monotonic)  # when it arrived


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # the work runs this long before it completes (a key stays in progress)
    raw: bytes | None = None  # sent as is instead of json.dumps(body)
    trickle: float = 0.0  # seconds between 16-byte pieces of the body
    # Money: a 200 answer is charged unless ``charge`` is False; ``completed`` is the result
    # of work that was done (charged, stored under the key) although this reply says otherwise.
    charge: bool | None = None
    completed: Reply | None = None
    answer_delay: float = 0.0  # the work is complete (charged, stored); the answer waits


@dataclass(frozen=True)
class Charge:
    """One piece of work the fake provider did and billed."""

    key: str | None  # the request's Idempotency-Key, if it sent one
    path: str
    digest: str  # body_digest(body)
    time: float  # time.time() when the work completed
    prompt: str | None  # request_prompt(body)


@dataclass
class _KeyState:
    digest: str
    owner: RecordedRequest  # the request that runs (or ran) the work
    completed: Reply | None = None  # None while that request is in progress


Idempotency = Literal["honour", "ignore"]


def body_digest(body: Any) -> str:
    """SHA-256 of the body as canonical JSON: the same request whatever its key order."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def request_prompt(body: Any) -> str | None:
    """An image request's ``prompt``, or a chat request's last user message."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("prompt"), str):
        return body["prompt"]
    users = [m for m in body.get("messages") or [] if isinstance(m, dict)
             and m.get("role") == "user"]
    content = users[-1].get("content") if users else None
    return content if isinstance(content, str) else None


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


def url_image(place: Callable[[str, bytes], str] | None = None) -> Behaviour:
    """Answer with the image's address instead of its bytes (DALL-E's default, and servers
    that ignore ``response_format``). ``place(path, png)`` keeps the picture somewhere and
    gives its URL (a ``BlobStore``'s ``put``); by default this server serves it (``GET``,
    no key needed, as a signed URL)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        work = ok_image()(request, server)
        if work.status != 200:
            return work
        image = base64.b64decode(work.body["data"][0]["b64_json"])
        path = f"{server.prefix}/files/{len(server.requests)}.png"
        if place is not None:
            url = place(path, image)
        else:
            server.files[path] = image
            url = server.base_url.removesuffix(server.prefix) + path
        return Reply(200, {"created": 0, "data": [{"url": url}]})
    return behave


def ok_chat(content: str | None = None, *, prompt_tokens: int = 7,
            completion_tokens: int = 5, finish_reason: str = "stop") -> Behaviour:
    """Answer with a chat completion (echoing the last user message unless ``content``);
    ``finish_reason="length"``: cut off at the model's output limit."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = content
        if reply is None:
            messages = request.body.get("messages") or [{}]
            reply = f"echo: {messages[-1].get('content')}"
        return Reply(200, {"id": "chatcmpl-fake", "object": "chat.completion",
                           "model": request.body.get("model"),
                           "choices": [{"index": 0, "finish_reason": finish_reason,
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


def redirect(status: int, location: str | None, *, done: bool = False) -> Behaviour:
    """A redirect: the API moved (301, 307, 308: nothing done), or with ``done`` the work
    was done and charged first ("done, see there" after a POST: 302, 303)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        work = server.default_behaviour(request.path)(request, server) if done else None
        return Reply(status, None, headers={"Location": location} if location else {},
                     raw=b"", charge=False, completed=work)
    return behave


def truncated_chat(content: str = "```python\nasync def orchestrate(ctx, args):\n```") -> Behaviour:
    """A chat completion cut off halfway (a proxy that dropped the end of the answer)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        whole = json.dumps(ok_chat(content)(request, server).body).encode()
        return Reply(200, None, raw=whole[:len(whole) // 2])
    return behave


def html_page() -> Behaviour:
    """A web page where the API should be (a base URL without the /v1 prefix); free."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(200, None, headers={"Content-Type": "text/html"},
                     raw=b"<!doctype html><html><body>Welcome</body></html>", charge=False)
    return behave


def trickle(seconds: float, content: str = "slow answer", then: Behaviour | None = None
            ) -> Behaviour:
    """A complete answer (``then``'s, else a chat completion of ``content``) sent in
    16-byte pieces, ``seconds`` apart."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = (then or ok_chat(content))(request, server)
        reply.trickle = seconds
        return reply
    return behave


def encoded(coding: str, squeeze: Callable[[bytes], bytes], then: Behaviour) -> Behaviour:
    """``then``'s answer sent with Content-Encoding ``coding``, its bytes ``squeeze``d
    (``gzip.compress``, or anything else for a broken stream)."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = then(request, server)
        raw = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
        return Reply(reply.status, None, raw=squeeze(raw),
                     headers={**reply.headers, "Content-Encoding": coding})
    return behave


def invalid_size() -> Behaviour:
    return error(400, "Invalid value for 'size': must be one of 256x256, 512x512, 1024x1024",
                 param="size")


def unknown_model() -> Behaviour:
    return error(404, "The model does not exist or you do not have access to it.",
                 param="model")


def slow(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Work ``seconds`` before answering (with ``then``, else the default).

    The work completes (is charged, stored under the key) at the end of the wait, even if
    the client gave up; a server stopped meanwhile drops the request uncharged."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = (then or server.default_behaviour(request.path))(request, server)
        reply.delay = seconds
        return reply
    return behave


def charge_then_error(status: int = 500, then: Behaviour | None = None) -> Behaviour:
    """Do the work (``then``, else the default), charge it, store it under the key when
    honouring, and answer ``status`` anyway (a provider that fails after billing).
    A request the work itself refuses (a 400) is answered that way, free."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        work = (then or server.default_behaviour(request.path))(request, server)
        if work.status != 200:
            return work
        return Reply(status, _error_body(f"fake server error {status} after the work was done",
                                         "server_error"), completed=work)
    return behave


def complete_late(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """The work completes at once (charged, stored under the key) but the answer comes
    only ``seconds`` later: a client with a shorter timeout gives up on a paid call."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = (then or server.default_behaviour(request.path))(request, server)
        reply.answer_delay = seconds
        return reply
    return behave


def rate_limited(retry_after: int = 1) -> Behaviour:
    """429 with ``Retry-After`` before any work: free."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(429, _error_body("Rate limit reached for requests; retry after "
                                      f"{retry_after} s", "rate_limit_error"),
                     headers={"Retry-After": str(retry_after)}, charge=False)
    return behave


def out_of_quota() -> Behaviour:
    """OpenAI's 429 for an account with no credit (a new key before billing is set up):
    no Retry-After, and no wait ever cures it. Free."""

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        return Reply(429, _error_body("You exceeded your current quota, please check your "
                                      "plan and billing details.", "insufficient_quota",
                                      code="insufficient_quota"), charge=False)
    return behave


def reject(status: int = 400, message: str = "") -> Behaviour:
    """Refuse the request before any work (``status``, OpenAI-style body): free."""
    refuse = error(status, message or f"fake rejection {status}")

    def behave(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
        reply = refuse(request, server)
        reply.charge = False
        return reply
    return behave


# ---- defaults: validate like the real API -------------------------------------------------------

def _default_images(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
    body = request.body if isinstance(request.body, dict) else {}
    if str(body.get("model", "")).startswith(UNKNOWN_MODEL_PREFIX):
        return unknown_model()(request, server)
    if body.get("size") not in SUPPORTED_SIZES:
        return invalid_size()(request, server)
    if "response_format" in body and str(body.get("model", "")).startswith("gpt-image"):
        # api.openai.com: GPT image models always answer in base64 and refuse the field
        return error(400, "Unknown parameter: 'response_format'.",
                     param="response_format")(request, server)
    if not str(body.get("prompt", "")).strip():
        return error(400, "prompt must not be empty", param="prompt")(request, server)
    return ok_image()(request, server)


REASONING_MODELS = ("o1", "o3", "o4", "gpt-5")


def refused_parameter(request: RecordedRequest, server: FakeOpenAIServer) -> Reply | None:
    """The 400 api.openai.com gives a reasoning model's chat request that carries
    ``max_tokens`` or a temperature other than 1; None for any other request."""
    body = request.body if isinstance(request.body, dict) else {}
    if not str(body.get("model", "")).startswith(REASONING_MODELS):
        return None
    if "max_tokens" in body:
        return error(400, "Unsupported parameter: 'max_tokens' is not supported with this "
                     "model. Use 'max_completion_tokens' instead.",
                     param="max_tokens")(request, server)
    if body.get("temperature", 1) != 1:
        return error(400, f"Unsupported value: 'temperature' does not support "
                     f"{body['temperature']} with this model. Only the default (1) value "
                     "is supported.", param="temperature")(request, server)
    return None


def _default_chat(request: RecordedRequest, server: FakeOpenAIServer) -> Reply:
    body = request.body if isinstance(request.body, dict) else {}
    if str(body.get("model", "")).startswith(UNKNOWN_MODEL_PREFIX):
        return unknown_model()(request, server)
    return refused_parameter(request, server) or ok_chat()(request, server)


def _free(reply: Reply) -> Reply:
    reply.charge = False
    return reply


# ---- server --------------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_GET(self) -> None:
        request = RecordedRequest("GET", self.path,
                                  {k.lower(): v for k, v in self.headers.items()}, None)
        self._send(self.server.fake.lookup(request))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        request = RecordedRequest("POST", self.path,
                                  {k.lower(): v for k, v in self.headers.items()}, body)
        fake = self.server.fake
        fake._enter()
        settled = False
        try:
            reply = fake.handle(request)
            if reply.delay and fake.stopping.wait(reply.delay):
                return  # shutting down: drop the connection like a dying upstream
            fake.settle(request, reply)
            settled = True
            if reply.answer_delay and fake.stopping.wait(reply.answer_delay):
                return
            self._send(reply)
        finally:
            if not settled:
                fake.abandon(request)  # the work never completed: its key is free again
            fake._leave()

    def _send(self, reply: Reply) -> None:
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
    def __init__(self, *, api_key: str | None = None, prefix: str = "/v1",
                 idempotency: Idempotency = "ignore", key_header: str = "Authorization"
                 ) -> None:
        """``key_header``: where the key is expected: ``Authorization`` as a bearer token,
        any other header (``api-key``: Azure OpenAI) as it is."""
        if idempotency not in ("honour", "ignore"):
            raise ValueError(f"idempotency must be 'honour' or 'ignore', not {idempotency!r}")
        self.api_key = api_key
        self.key_header = key_header.lower()
        self.prefix = prefix
        self.idempotency = idempotency
        self.requests: list[RecordedRequest] = []
        self.charges: list[Charge] = []
        self.files: dict[str, bytes] = {}  # served by GET (url_image)
        self.in_flight = 0  # POST requests being worked on or answered right now
        self.peak_concurrency = 0  # the most POST requests in flight at once
        self.stopping = threading.Event()
        self._queues: dict[str, deque[Behaviour]] = defaultdict(deque)
        self._front: dict[str, deque[Behaviour | None]] = defaultdict(deque)
        self._keys: dict[str, _KeyState] = {}
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

    def in_front(self, path: str, *behaviours: Behaviour | None) -> None:
        """Answer the next requests to ``path`` from in front of the provider (a gateway's
        rate limiter), before any key is read: ``behaviours`` in order, once each; None
        passes that request on to the provider."""
        with self._lock:
            self._front[path].extend(behaviours)

    def requests_to(self, path: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def default_behaviour(self, path: str) -> Behaviour:
        if path == f"{self.prefix}/images/generations":
            return _default_images
        if path == f"{self.prefix}/chat/completions":
            return _default_chat
        return error(404, f"unknown path {path}")

    def charged(self, prompt: str | None = None) -> int:
        """How many times the work was charged (for ``prompt`` only, if given)."""
        with self._lock:
            return sum(1 for c in self.charges if prompt is None or c.prompt == prompt)

    def _authorized(self, request: RecordedRequest) -> bool:
        expected = f"Bearer {self.api_key}" if self.key_header == "authorization" \
            else self.api_key
        return self.api_key is None or request.headers.get(self.key_header) == expected

    def handle(self, request: RecordedRequest) -> Reply:
        key = request.headers.get("idempotency-key")
        with self._lock:
            self.requests.append(request)
            queued = self._queues[request.path]
            if not self._authorized(request):
                if queued:
                    queued.popleft()
                return _free(error(401, "Incorrect API key provided.")(request, self))
            front = self._front[request.path].popleft() if self._front[request.path] else None
            if front is not None:
                return _free(front(request, self))
            if self.idempotency == "honour" and key:
                answered = self._claim(key, body_digest(request.body), request)
                if answered is not None:
                    return answered  # the provider ran nothing: no queued behaviour is used
            behaviour = queued.popleft() if queued else None
        return (behaviour or self.default_behaviour(request.path))(request, self)

    def _claim(self, key: str, digest: str, request: RecordedRequest) -> Reply | None:
        """Under the lock: a stored, refused or conflicting answer, or None after marking
        the key in progress for ``request``."""
        state = self._keys.get(key)
        if state is None:
            self._keys[key] = _KeyState(digest, request)
            return None
        if state.digest != digest:
            return _free(Reply(422, _error_body(
                f"Idempotency-Key {key!r} was already used with another request (a different "
                "body); send a new request under a new key", "invalid_request_error",
                code="idempotency_key_reused")))
        if state.completed is None:
            return _free(Reply(409, _error_body(
                f"a request with Idempotency-Key {key!r} is still in progress; retry after it "
                "completes", "conflict", code="idempotency_key_in_progress")))
        stored = state.completed
        return Reply(stored.status, stored.body, headers={**stored.headers,
                                                          "Idempotent-Replayed": "true"},
                     raw=stored.raw, charge=False)

    def settle(self, request: RecordedRequest, reply: Reply) -> None:
        """The work of ``request`` is over: charge it if it was done, store it under the key
        when honouring, or free the key."""
        work = reply.completed if reply.completed is not None else \
            reply if reply.status == 200 and reply.charge is not False else None
        key = request.headers.get("idempotency-key")
        with self._lock:
            if work is not None:
                self.charges.append(Charge(key, request.path, body_digest(request.body),
                                           time.time(), request_prompt(request.body)))
            if key is None or not self._owns(key, request):
                return
            if work is None:
                del self._keys[key]
            else:
                self._keys[key].completed = Reply(work.status, work.body, dict(work.headers),
                                                  raw=work.raw)

    def abandon(self, request: RecordedRequest) -> None:
        """``request`` was dropped before its work completed: its key is free, nothing charged."""
        key = request.headers.get("idempotency-key")
        with self._lock:
            if key is not None and self._owns(key, request):
                del self._keys[key]

    def _owns(self, key: str, request: RecordedRequest) -> bool:
        """Under the lock: ``request`` is the one running the work of ``key`` right now."""
        state = self._keys.get(key)
        return state is not None and state.owner is request and state.completed is None

    def lookup(self, request: RecordedRequest) -> Reply:
        """``GET {prefix}/requests/{key}``: what the provider knows of a key (or the
        behaviour queued for that path)."""
        with self._lock:
            self.requests.append(request)
            queued = self._queues[request.path]
            behaviour = queued.popleft() if queued else None
        if behaviour is not None:
            return behaviour(request, self)
        if request.path in self.files:
            return Reply(200, None, headers={"Content-Type": "image/png"},
                         raw=self.files[request.path])
        if not self._authorized(request):
            return error(401, "Incorrect API key provided.")(request, self)
        route = f"{self.prefix}/requests/"
        if not request.path.startswith(route) or len(request.path) == len(route):
            return error(404, f"unknown path {request.path}")(request, self)
        key = unquote(request.path[len(route):])
        with self._lock:
            state = self._keys.get(key) if self.idempotency == "honour" else None
            if state is None:
                why = ("no request is known under Idempotency-Key " + repr(key)
                       if self.idempotency == "honour" else
                       "this provider keeps no requests by Idempotency-Key")
                return Reply(404, _error_body(why, "invalid_request_error", code="unknown_key"))
            if state.completed is None:
                return Reply(200, {"status": "in_progress"})
            return Reply(200, {"status": "completed", "response": state.completed.body})

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak_concurrency = max(self.peak_concurrency, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

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

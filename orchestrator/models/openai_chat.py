"""An OpenAI-compatible chat-completions backend over httpx.

Works against OpenAI, a LiteLLM proxy, vLLM or any server that speaks
``POST {base_url}/chat/completions``. ``base_url`` includes the version
prefix, as in the OpenAI SDK (``https://api.openai.com/v1``,
``http://127.0.0.1:4000/v1`` for a LiteLLM proxy).

Transient failures (429, 5xx, timeouts, dropped connections, malformed or
truncated answers) are retried with exponential backoff, honouring
``Retry-After``, within ``REVISE_MODEL_RETRIES`` and the overall
``REVISE_MODEL_DEADLINE_SECONDS``; each request is bounded by
``REVISE_MODEL_TIMEOUT_SECONDS`` from connect to the last byte (the answer is
streamed, so a server that trickles bytes cannot hold it open). What is left
after the retries is a ``ModelEndpointError``; a wrong key, model or base URL
is a ``ConfigError`` at once. The API key never appears in a message:
provider error text is scrubbed of it before it is quoted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from broker.content_encoding import ACCEPT_ENCODING, EncodingError, read_decoded
from broker.errors import AnswerCutOff, ConfigError, ReviseError
from broker.foreign_json import parse_foreign_json
from broker.providers.http import (
    chat_reply_text,
    key_header,
    quota_exhausted,
    reasoning_model,
    redacted,
    redirect_fix,
    secrets_of,
)
from broker.retry_after import wait_asked
from broker.settings import Settings, header_map, model_url_problem
from orchestrator.models.base import Message, ModelEndpointError

log = logging.getLogger("revise.models")

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})
_MAX_RETRY_AFTER = 60.0
_MAX_ANSWER_BYTES = 8 << 20


class _Overran(Exception):
    """The answer was still arriving when the request's time was up."""


@dataclass(frozen=True)
class _Transient:
    """Why one request gave no answer, when another request may give one."""

    kind: str  # http | timeout | connect | dropped | malformed
    reason: str
    status: int | None = None
    retry_after: float | None = None  # seconds the endpoint asked to wait


class OpenAIChatBackend:
    def __init__(self, *, base_url: str, model: str, api_key: SecretStr | str | None = None,
                 timeout: float = 120.0, max_retries: int = 3, backoff: float = 1.0,
                 max_backoff: float = 30.0, deadline: float | None = None,
                 temperature: float | None = 0.0, max_tokens: int | None = None,
                 client: httpx.Client | None = None, api_key_header: str = "Authorization",
                 extra_headers: dict[str, str] | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if (problem := model_url_problem(base_url)) is not None:
            raise ConfigError(problem, setting="REVISE_MODEL_BASE_URL")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key if isinstance(api_key, SecretStr) or api_key is None \
            else SecretStr(api_key)
        self.api_key_header = api_key_header
        self._extra_headers = dict(extra_headers or {})
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.deadline = deadline
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._refused: set[str] = set()  # parameters the endpoint refused for this model
        self._sleep = sleep
        self._clock = clock
        self._client = client or httpx.Client()
        # Set by a caller that shows progress (``orchestrator.models.progress``).
        self.on_notice: Callable[[str], None] | None = None

    @property
    def name(self) -> str:
        return self.model

    @classmethod
    def from_settings(cls, settings: Settings, *, model: str | None = None,
                      **kwargs: Any) -> OpenAIChatBackend:
        name = model or settings.model_name
        if not settings.model_base_url:
            raise ConfigError(
                "no model endpoint configured: set REVISE_MODEL_BASE_URL to an "
                "OpenAI-compatible base URL (e.g. http://127.0.0.1:4000/v1 for a LiteLLM "
                "proxy) and REVISE_MODEL_API_KEY, or use --model recorded:PATH.jsonl")
        if not name:
            raise ConfigError("no model name: pass --model NAME or set REVISE_MODEL_NAME")
        options: dict[str, Any] = {
            "timeout": settings.model_timeout_seconds, "max_retries": settings.model_retries,
            "backoff": settings.model_backoff_seconds,
            "max_backoff": settings.model_max_backoff_seconds,
            "deadline": settings.model_deadline_seconds, **kwargs}
        return cls(base_url=settings.model_base_url, model=name,
                   api_key=settings.model_api_key,
                   api_key_header=settings.model_api_key_header,
                   extra_headers=header_map(settings.model_headers), **options)

    def close(self) -> None:
        self._client.close()

    # ---- the call -----------------------------------------------------------------------

    def _body(self, messages: list[Message]) -> dict[str, Any]:
        """The request, without what this model refuses: a reasoning model (or one that
        refused it once) gets no temperature and its token cap as
        ``max_completion_tokens``."""
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        reasoning = reasoning_model(self.model)
        if self.temperature is not None and not reasoning and \
                "temperature" not in self._refused:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            renamed = reasoning or "max_tokens" in self._refused
            body["max_completion_tokens" if renamed else "max_tokens"] = self.max_tokens
        return body

    def _adapted(self, status: int, raw: bytes) -> bool:
        """A 400 that names a parameter this model refuses (``temperature``,
        ``max_tokens``: OpenAI's reasoning models) is asked again without it, once."""
        if status != 400:
            return False
        try:
            param = parse_foreign_json(raw)["error"]["param"]
        except (ValueError, RecursionError, KeyError, TypeError):
            return False
        if param not in ("temperature", "max_tokens") or param in self._refused:
            return False
        self._refused.add(param)
        self._notice(f"model {self.model} refuses {param}; asking without it")
        return True

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        url = f"{self.base_url}/chat/completions"
        started = self._clock()
        last = _Transient("timeout", "no request was made")
        tries = 0
        for attempt in range(self.max_retries + 1):
            left = self._left(started)
            if left <= 0:
                break
            tries += 1
            if attempt:
                self._notice(f"retry {attempt}/{self.max_retries} after {last.reason}")
            outcome = self._attempt(url, messages, purpose, min(self.timeout, left))
            if isinstance(outcome, str):
                return outcome
            last = outcome
            if attempt == self.max_retries:
                break
            delay = self._delay(attempt, outcome.retry_after)
            if self._left(started) <= delay:
                break  # no time for another request within the deadline
            self._notice(f"{outcome.reason}; retry {attempt + 1}/{self.max_retries} in "
                         f"{delay:.1f} s")
            log.log(logging.INFO if self.on_notice else logging.WARNING,
                    "model %s (%s): %s; retry %d/%d in %.1fs", self.model, purpose,
                    outcome.reason, attempt + 1, self.max_retries, delay)
            self._sleep(delay)
        raise self._exhausted(last, tries, self._clock() - started)

    def _left(self, started: float) -> float:
        if self.deadline is None:
            return float("inf")
        return self.deadline - (self._clock() - started)

    def _notice(self, text: str) -> None:
        if self.on_notice is not None:
            self.on_notice(text)

    def _attempt(self, url: str, messages: list[Message], purpose: str, timeout: float
                 ) -> str | _Transient:
        try:
            status, headers, raw = self._post(url, self._body(messages), purpose, timeout)
            while self._adapted(status, raw):
                status, headers, raw = self._post(url, self._body(messages), purpose,
                                                  timeout)
        except (httpx.TimeoutException, _Overran):
            return _Transient("timeout", f"no answer within {timeout:.3g} s")
        except httpx.ConnectError as exc:
            return _Transient("connect", f"could not connect ({type(exc).__name__})")
        except httpx.TransportError as exc:
            return _Transient("dropped", f"the connection broke ({type(exc).__name__})")
        except EncodingError as exc:
            return _Transient("malformed", f"an answer that could not be read: {exc}")
        if 300 <= status < 400:  # followed, the request could be sent where it was not meant
            location = headers.get("location")
            raise ConfigError(
                f"the model endpoint {self.base_url} answered HTTP {status}, a redirect to "
                f"{self._scrub(location or 'no address')[:300]}; Revise follows no redirect: "
                + redirect_fix(url, "/chat/completions", location, "REVISE_MODEL_BASE_URL"),
                status=status, setting="REVISE_MODEL_BASE_URL")
        if status < 400:
            return self._content(status, headers, raw)
        if status not in RETRY_STATUSES or (status == 429 and quota_exhausted(raw)):
            raise self._fatal(status, raw)
        return _Transient("http", f"HTTP {status}: {self._message(raw)}", status,
                          wait_asked(headers, now=time.time()))

    def _post(self, url: str, body: dict[str, Any], purpose: str, timeout: float
              ) -> tuple[int, httpx.Headers, bytes]:
        """One request, read to the end within ``timeout`` seconds."""
        until = self._clock() + timeout
        limits = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        with self._client.stream("POST", url, json=body, headers=self._headers(purpose),
                                 timeout=limits) as response:
            answer, cut = read_decoded(response.iter_raw(),
                                       response.headers.get("content-encoding"),
                                       _MAX_ANSWER_BYTES, lambda: self._clock() > until)
            if cut is not None:
                raise _Overran
            return response.status_code, response.headers, answer

    def _headers(self, purpose: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "X-Revise-Purpose": purpose,
                   "Accept-Encoding": ACCEPT_ENCODING}
        return headers | self._extra_headers | key_header(self.api_key_header, self._key)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, _MAX_RETRY_AFTER)
        return min(self.backoff * (2 ** attempt), self.max_backoff)

    # ---- answers and errors -------------------------------------------------------------

    def _content(self, status: int, headers: httpx.Headers, raw: bytes) -> str | _Transient:
        try:
            data = parse_foreign_json(raw)
        except (ValueError, RecursionError):
            start = raw[:200].decode("utf-8", "replace").lstrip().lower()
            if "html" in headers.get("content-type", "") or start.startswith("<"):
                raise ConfigError(
                    f"the model endpoint {self.base_url} answered with a web page (HTTP "
                    f"{status}), not an API answer; set REVISE_MODEL_BASE_URL to an "
                    "OpenAI-compatible base URL with its API prefix (e.g. /v1)") from None
            return _Transient("malformed", f"a malformed answer: {len(raw)} bytes that are "
                              "not complete JSON (cut short?)")
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            return _Transient("malformed", "a malformed answer: JSON without "
                              "choices[0].message")
        content = chat_reply_text(message.get("content") if isinstance(message, dict)
                                  else None)
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        if not content.strip():
            raise ModelEndpointError(
                f"model {self.model} returned an empty answer (finish_reason {finish!r}); "
                "retry, or choose a model with a larger output limit (a reasoning model "
                "may spend all of it thinking)", reason="empty")
        if finish == "length":  # a script taken from it would be cut off, maybe parsable
            raise AnswerCutOff(f"model {self.model} stopped at its output limit "
                               "(finish_reason 'length'): its answer is cut off; answer with "
                               "only the whole repaired script, in one ```python block, "
                               "without prose or a copy of the failed script")
        return content

    def _message(self, raw: bytes) -> str:
        try:
            data = parse_foreign_json(raw)
            text = data["error"]["message"] if isinstance(data.get("error"), dict) \
                else str(data.get("error") or data.get("detail") or data)
        except (ValueError, RecursionError, KeyError, TypeError, AttributeError):
            text = raw[:2000].decode("utf-8", "replace")
        return self._scrub(str(text))[:500]

    def _scrub(self, text: str) -> str:
        return redacted(text, [secret for secret in secrets_of(self._key, self._extra_headers)
                               if len(secret) >= 4], "***")

    def _fatal(self, status: int, raw: bytes) -> ReviseError:
        detail = self._message(raw)
        if status in (401, 403):
            return ConfigError(
                f"the model endpoint {self.base_url} refused the credentials (HTTP {status}: "
                f"{detail}); set REVISE_MODEL_API_KEY to a key that may use model "
                f"{self.model}", status=status, setting="REVISE_MODEL_API_KEY")
        if status == 429:  # out of quota: a rate limit is retried before it gets here
            return ConfigError(
                f"the model endpoint {self.base_url} says the account is out of quota "
                f"(HTTP 429: {detail}); waiting does not help: check its plan and billing, "
                "or set REVISE_MODEL_API_KEY to another key", status=status,
                setting="REVISE_MODEL_API_KEY")
        if status == 404:
            return ConfigError(
                f"the model endpoint {self.base_url} does not serve model {self.model!r} "
                f"(HTTP 404: {detail}); check --model / REVISE_MODEL_NAME and that "
                "REVISE_MODEL_BASE_URL ends with the API prefix (e.g. /v1)", status=status,
                setting="REVISE_MODEL_NAME")
        return ModelEndpointError(f"the model endpoint rejected the request (HTTP {status}: "
                                  f"{detail}); the prompt may be too long for {self.model}",
                                  status=status, reason="rejected")

    def _exhausted(self, last: _Transient, tries: int, elapsed: float) -> ModelEndpointError:
        where = f"the model endpoint {self.base_url}"
        spent = f"after {tries} attempt{'s' if tries != 1 else ''} in {elapsed:.1f} s"
        if self.deadline is not None and tries < self.max_retries + 1:
            spent += f" (REVISE_MODEL_DEADLINE_SECONDS={self.deadline:g} reached)"
        fields: dict[str, Any] = {"reason": last.kind, "attempts": tries}
        if last.status is not None:
            fields["status"] = last.status
        if last.status == 429:
            text = (f"model {self.model} is rate limited at {self.base_url} {spent} "
                    f"({last.reason}); wait and retry, or raise the proxy's limits")
        elif last.kind == "http":
            text = (f"{where} kept failing {spent} ({last.reason}); the provider or proxy is "
                    "down, retry later")
        elif last.kind == "timeout":
            text = (f"{where} gave {last.reason} {spent}; is it up? A slow model needs a "
                    "larger REVISE_MODEL_TIMEOUT_SECONDS (retries: REVISE_MODEL_RETRIES)")
        elif last.kind == "malformed":
            text = (f"{where} sent {last.reason} {spent}; the server or a proxy in between "
                    "cut the answer short or does not speak the OpenAI chat API")
        else:
            text = (f"{where} {last.reason} {spent}; check REVISE_MODEL_BASE_URL and that "
                    "the server is up")
        return ModelEndpointError(text, **fields)

"""An OpenAI-compatible chat-completions backend over httpx.

Works against OpenAI, a LiteLLM proxy, vLLM or any server that speaks
``POST {base_url}/chat/completions``. ``base_url`` includes the version
prefix, as in the OpenAI SDK (``https://api.openai.com/v1``,
``http://127.0.0.1:4000/v1`` for a LiteLLM proxy).

Transient failures (429, 5xx, timeouts, dropped connections) are retried with
exponential backoff, honouring ``Retry-After``. Everything else fails at once
with a message that names the fix. The API key never appears in a message:
provider error text is scrubbed of it before it is quoted.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from broker.errors import ConfigError, ReviseError
from broker.settings import Settings
from orchestrator.models.base import Message

log = logging.getLogger("revise.models")

RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})
_MAX_RETRY_AFTER = 60.0


class OpenAIChatBackend:
    def __init__(self, *, base_url: str, model: str, api_key: SecretStr | str | None = None,
                 timeout: float = 120.0, max_retries: int = 3, backoff: float = 1.0,
                 max_backoff: float = 30.0, temperature: float | None = 0.0,
                 max_tokens: int | None = None, client: httpx.Client | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ConfigError(f"model base URL {base_url!r} is not an http(s) URL; set "
                              "REVISE_MODEL_BASE_URL, e.g. http://127.0.0.1:4000/v1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._key = api_key if isinstance(api_key, SecretStr) or api_key is None \
            else SecretStr(api_key)
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._sleep = sleep
        self._client = client or httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0))

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
        return cls(base_url=settings.model_base_url, model=name,
                   api_key=settings.model_api_key, **kwargs)

    def close(self) -> None:
        self._client.close()

    # ---- the call -----------------------------------------------------------------------

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.max_tokens is not None:
            body["max_tokens"] = self.max_tokens
        url = f"{self.base_url}/chat/completions"
        last: str = ""
        for attempt in range(self.max_retries + 1):
            try:
                response = self._client.post(url, json=body, headers=self._headers(purpose))
            except httpx.TimeoutException:
                last = "timed out"
                delay = self._delay(attempt, None)
            except httpx.TransportError as exc:
                last = f"could not connect ({type(exc).__name__})"
                delay = self._delay(attempt, None)
            else:
                if response.status_code < 400:
                    return self._content(response)
                if response.status_code not in RETRY_STATUSES:
                    raise self._fatal(response)
                last = f"HTTP {response.status_code}: {self._message(response)}"
                delay = self._delay(attempt, response.headers.get("retry-after"))
            if attempt < self.max_retries:
                log.warning("model %s (%s): %s; retry %d/%d in %.1fs", self.model, purpose,
                            last, attempt + 1, self.max_retries, delay)
                self._sleep(delay)
        raise self._exhausted(last)

    def _headers(self, purpose: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "X-Revise-Purpose": purpose}
        if self._key is not None and self._key.get_secret_value():
            headers["Authorization"] = f"Bearer {self._key.get_secret_value()}"
        return headers

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER)
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        return min(self.backoff * (2 ** attempt), self.max_backoff)

    # ---- answers and errors -------------------------------------------------------------

    def _content(self, response: httpx.Response) -> str:
        try:
            data = response.json()
            message = data["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ReviseError(f"the model endpoint {self.base_url} answered without "
                              "choices[0].message; is REVISE_MODEL_BASE_URL an "
                              "OpenAI-compatible /v1 base URL?") from None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list):  # content parts (some proxies)
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if not isinstance(content, str) or not content.strip():
            raise ReviseError(f"model {self.model} returned an empty answer (finish_reason "
                              f"{data['choices'][0].get('finish_reason')!r}); retry or raise "
                              "its max_tokens")
        return content

    def _message(self, response: httpx.Response) -> str:
        try:
            data = response.json()
            text = data["error"]["message"] if isinstance(data.get("error"), dict) \
                else str(data.get("error") or data.get("detail") or data)
        except (ValueError, KeyError, TypeError, AttributeError):
            text = response.text
        return self._scrub(str(text))[:500]

    def _scrub(self, text: str) -> str:
        key = self._key.get_secret_value() if self._key is not None else ""
        return text.replace(key, "***") if len(key) >= 4 else text

    def _fatal(self, response: httpx.Response) -> ReviseError:
        status = response.status_code
        detail = self._message(response)
        if status in (401, 403):
            return ConfigError(
                f"the model endpoint {self.base_url} refused the credentials (HTTP {status}: "
                f"{detail}); set REVISE_MODEL_API_KEY to a key that may use model "
                f"{self.model}", status=status)
        if status == 404:
            return ConfigError(
                f"the model endpoint {self.base_url} does not serve model {self.model!r} "
                f"(HTTP 404: {detail}); check --model / REVISE_MODEL_NAME and that "
                "REVISE_MODEL_BASE_URL ends with the API prefix (e.g. /v1)", status=status)
        return ReviseError(f"the model endpoint rejected the request (HTTP {status}: "
                           f"{detail}); the prompt may be too long for {self.model}",
                           status=status)

    def _exhausted(self, last: str) -> ReviseError:
        tries = self.max_retries + 1
        if last.startswith("HTTP 429"):
            return ReviseError(f"model {self.model} is rate limited at {self.base_url} after "
                               f"{tries} attempts ({last}); wait and retry, or raise the "
                               "proxy's limits", status=429)
        if last.startswith("HTTP 5") or last.startswith("HTTP"):
            return ReviseError(f"the model endpoint {self.base_url} kept failing after "
                               f"{tries} attempts ({last}); the provider or proxy is down, "
                               "retry later")
        return ReviseError(f"the model endpoint {self.base_url} {last} after {tries} "
                           "attempts; check REVISE_MODEL_BASE_URL and that the server is up")

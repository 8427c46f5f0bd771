"""HTTP adapters for OpenAI-compatible image and chat APIs.

Each request carries the ``Idempotency-Key`` of that request (``broker.identity.
request_key``: run token, capability, payload digest), so a retry of the same
request after a timeout lets a provider that honours keys deduplicate instead of
charging twice, and a changed payload never reuses a key. HTTP failures become
``CapabilityError`` with a stable ``provider_code`` and a ``retryable`` flag; the
broker reads from them whether the provider may have charged (``broker.charging``):
``connection_error`` means the request never left, ``timeout`` and
``connection_lost`` that it did. The API key lives only in the
request header: it is redacted from every message this module builds.

A provider's answer is read as a stream, within the request's timeout from connect
to the last byte (a server that trickles bytes cannot hold a call open) and up to
the size of the largest artifact the store accepts, base64-encoded in JSON (a server
that sends without end cannot exhaust the worker's memory). An answer cut off by
either bound was sent, so the provider may have charged for it.
"""

from __future__ import annotations

import base64
import json
import math
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import SecretStr

from broker import png
from broker.artifacts import (
    DEFAULT_MAX_BYTES,
    ArtifactCorrupt,
    ArtifactNotFound,
    ArtifactRef,
    ArtifactStore,
    ArtifactTooLarge,
)
from broker.catalog import Capability
from broker.charging import QUOTA_EXCEEDED
from broker.content_encoding import ACCEPT_ENCODING, EncodingError, read_decoded
from broker.errors import CapabilityError, ReviseError, StoreUnavailable
from broker.foreign_json import parse_foreign_json
from broker.providers.base import CallContext, Lookup, ProviderResult, provider_error
from broker.providers.clients import ClientPool
from broker.retry_after import wait_asked

_STATUS_CODES: dict[int, tuple[str, bool]] = {
    400: ("invalid_parameter", False), 401: ("auth", False), 403: ("auth", False),
    404: ("model_not_found", False), 408: ("timeout", True), 409: ("conflict", True),
    422: ("invalid_parameter", False), 429: ("rate_limited", True),
}
# A redirect that says the resource lives elsewhere: nothing was carried out here. Any
# other (302 and 303 above all: "done, see there" after a POST) may follow work done.
_MOVED = frozenset({301, 307, 308})
QUOTA_EXCEEDED_WORD = "insufficient_quota"  # OpenAI's error code (and type)
_MAX_DETAIL = 300
_MAX_URL = 2048  # of an image's address kept in an error: a signed URL runs to ~500
_ERROR_BODY_BYTES = 64 << 10  # of an error answer: enough for any message it quotes
_ANSWER_SLACK_BYTES = 1 << 20  # an answer's JSON around its base64 image
# What an image address may answer besides image/*: bytes of no declared kind (S3, GCS)
_BYTES_TYPES = frozenset({"application/octet-stream", "binary/octet-stream"})


def _status_code(status: int) -> tuple[str, bool]:
    if status in _STATUS_CODES:
        return _STATUS_CODES[status]
    if status >= 500:
        return "provider_error", True
    return "invalid_request", False


class _OpenAIAdapter(ABC):
    """Shared transport: auth header, idempotency key, error mapping, redaction."""

    name = "http"
    sends_idempotency_key = True

    def __init__(self, *, base_url: str, api_key: SecretStr | str | None,
                 artifacts: ArtifactStore, timeout: float = 180.0,
                 client: httpx.Client | None = None,
                 models: Mapping[str, str] | None = None,
                 lookup_path: str | None = None,
                 api_key_header: str = "Authorization",
                 extra_headers: Mapping[str, str] | None = None) -> None:
        """``lookup_path`` (e.g. ``/requests/{key}``): where the provider answers what it
        did for an idempotency key; None when it offers no such lookup. ``extra_headers``
        go with every request to the provider (a gateway's own key): secrets, as the key."""
        self.base_url = base_url.rstrip("/")
        self.lookup_path = lookup_path
        self.api_key_header = api_key_header
        self._extra_headers = dict(extra_headers or {})
        self._key = api_key if isinstance(api_key, SecretStr) or api_key is None \
            else SecretStr(api_key)
        self.artifacts = artifacts
        self.timeout = timeout
        tls = httpx.create_ssl_context()  # one for all clients: making one costs ~20 ms
        self._clients = ClientPool(lambda: httpx.Client(timeout=timeout, verify=tls),
                                   shared=client)
        # Scripts name catalog models (local-image-1); an operator maps them to real ones.
        self.models = dict(models or {})

    def close(self) -> None:
        self._clients.close()

    def _model(self, name: str) -> str:
        return self.models.get(name, name)

    def _redact(self, text: str) -> str:
        return self._unsecret(text)[:_MAX_DETAIL]

    def _unsecret(self, text: str) -> str:
        """``text`` without the key or any extra header's value."""
        return redacted(text, secrets_of(self._key, self._extra_headers), "[redacted]")

    def _post(self, capability: Capability, call: CallContext, path: str,
              body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Idempotency-Key": call.idempotency_key, **self._headers()}
        timeout = self._timeout(call)
        try:
            answer = self._send(capability, call, "POST", f"{self.base_url}{path}", timeout,
                                json=body, headers=headers)
        except httpx.ConnectTimeout:
            raise provider_error(
                capability, call,
                f"{capability.name}: could not connect to the provider at {self.base_url} "
                f"within {timeout:g}s; the request never left", status=None,
                provider_code="connection_error", retryable=True) from None
        except httpx.TimeoutException:
            raise provider_error(
                capability, call,
                f"{capability.name}: no answer from the provider within {timeout:g}s; "
                "the provider may have completed the request (and charged for it); a retry "
                "with the same Idempotency-Key lets it return that result instead",
                status=None, provider_code="timeout", retryable=True) from None
        except (httpx.ConnectError, httpx.UnsupportedProtocol, httpx.LocalProtocolError
                ) as exc:
            raise provider_error(
                capability, call,
                f"{capability.name}: could not reach the provider at {self.base_url} "
                f"({type(exc).__name__}: {self._redact(str(exc))}); check the base URL",
                status=None, provider_code="connection_error", retryable=True) from None
        except httpx.HTTPError as exc:
            raise provider_error(
                capability, call,
                f"{capability.name}: the connection to the provider broke after the request "
                f"was sent ({type(exc).__name__}: {self._redact(str(exc))}); the provider "
                "may have completed it (and charged for it)",
                status=None, provider_code="connection_lost", retryable=True) from None
        if answer.is_redirect:
            raise self._redirect_error(capability, call, path, answer)
        if answer.status >= 400:
            raise self._http_error(capability, call, answer)
        data = _json_body(answer.body)
        if data is None:
            raise _bad_response(capability, call, "the response body is not a JSON object")
        if isinstance(data.get("error"), dict) and not ({"data", "choices"} & data.keys()):
            # Some gateways answer an upstream failure with 200 and an error object: its
            # words, not "no image in the answer"; it may still have been charged.
            detail, _ = self._error_detail(answer)
            raise _bad_response(capability, call, f"HTTP 200 carrying an error: {detail}")
        return data

    def _timeout(self, call: CallContext) -> float:
        return self.timeout if call.timeout_seconds is None \
            else min(self.timeout, call.timeout_seconds)

    def _send(self, capability: Capability, call: CallContext, method: str, url: str,
              timeout: float, **request: Any) -> _Answer:
        """One request, its answer read to the end within ``timeout`` seconds and
        ``answer_bytes`` (an error answer: its first ``_ERROR_BODY_BYTES``)."""
        until = time.monotonic() + timeout
        with self._clients.client() as client, client.stream(
                method, url, timeout=timeout, **request) as response:
            failed = response.status_code >= 400
            limit = _ERROR_BODY_BYTES if failed else self.answer_bytes
            try:
                body, cut = read_decoded(response.iter_raw(),
                                         response.headers.get("content-encoding"), limit,
                                         lambda: time.monotonic() > until)
            except EncodingError as exc:
                if not failed:
                    raise _bad_response(capability, call, str(exc)) from None
                body, cut = exc.partial, None
            # An error answer's status says it all: what came of its body is kept.
            if cut == "over" and not failed:
                raise _bad_response(capability, call, f"the answer is over {limit} bytes, "
                                    f"more than the largest artifact "
                                    f"({self._largest_artifact} bytes, "
                                    "REVISE_ARTIFACT_MAX_BYTES) takes in base64")
            if cut == "late" and not failed:
                raise provider_error(
                    capability, call, f"{capability.name}: the provider's answer was still "
                    f"arriving after {timeout:g}s; the provider may have completed the "
                    "request (and charged for it)", status=None, provider_code="timeout",
                    retryable=True)
            return _Answer(response.status_code, response.headers, body[:limit],
                           response.reason_phrase)

    @property
    def _largest_artifact(self) -> int:
        return getattr(self.artifacts, "max_bytes", None) or DEFAULT_MAX_BYTES

    @property
    def answer_bytes(self) -> int:
        """The largest answer read: the largest artifact the store accepts, in base64,
        with room for the JSON around it."""
        return 4 * math.ceil(self._largest_artifact / 3) + _ANSWER_SLACK_BYTES

    def _headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING,
                **self._extra_headers, **key_header(self.api_key_header, self._key)}

    def lookup(self, capability: Capability, payload: dict, call: CallContext) -> Lookup:
        """What the provider did for ``call.idempotency_key``: ``completed`` with the
        answer it kept, ``unknown`` (it has no record: the request never reached it, so
        it was not charged), or ``in_progress``. A failure to ask raises CapabilityError."""
        if self.lookup_path is None:
            raise provider_error(capability, call, f"{capability.name}: this provider offers "
                                 "no lookup by idempotency key (REVISE_PROVIDER_LOOKUP_PATH)",
                                 status=None, provider_code="no_lookup")
        path = self.lookup_path.replace("{key}", call.idempotency_key)
        try:
            answer = self._send(capability, call, "GET", f"{self.base_url}{path}",
                                self.timeout, headers=self._headers())
        except httpx.HTTPError as exc:
            raise provider_error(capability, call, f"{capability.name}: the lookup at "
                                 f"{self.base_url} failed ({type(exc).__name__}: "
                                 f"{self._redact(str(exc))})", status=None,
                                 provider_code="connection_error") from None
        if answer.is_redirect:
            raise self._redirect_error(capability, call, path, answer)
        if answer.status == 404:
            return Lookup("unknown")
        if answer.status >= 400:
            raise self._http_error(capability, call, answer)
        data = _json_body(answer.body) or {}
        status = data.get("status")
        if status == "completed" and isinstance(data.get("response"), dict):
            return Lookup("completed", self._answer(capability, payload, call,
                                                    data["response"]))
        if status == "in_progress":
            return Lookup("in_progress")
        raise _bad_response(capability, call, "the lookup answer is not "
                            '{"status": "completed", "response": {...}} or "in_progress"')

    @abstractmethod
    def _answer(self, capability: Capability, payload: dict, call: CallContext,
                data: dict[str, Any]) -> ProviderResult:
        """The result of a provider answer (to the request, or kept for its key)."""

    def _http_error(self, capability: Capability, call: CallContext,
                    answer: _Answer) -> CapabilityError:
        code, retryable = _status_code(answer.status)
        detail, param = self._error_detail(answer)
        if answer.status == 429 and quota_exhausted(answer.body):
            code, retryable = QUOTA_EXCEEDED, False
            detail += ("; the provider account is out of quota: waiting does not help, "
                       "check its plan and billing")
        elif code == "auth":
            # Never echo anything that might contain the credential back to the script.
            detail = "the provider rejected the API key; check REVISE_PROVIDER_API_KEY"
        elif answer.status == 404 and "model" not in detail.lower():
            detail += ("; if the path is what is unknown, check that REVISE_PROVIDER_BASE_URL "
                       "holds the API's prefix (e.g. https://api.openai.com/v1)")
        extra: dict[str, Any] = {"param": param} if param else {}
        retry_after = _retry_after(answer.headers)
        if retry_after:
            extra["retry_after"] = retry_after
        return provider_error(
            capability, call,
            f"{capability.name}: provider answered HTTP {answer.status} ({code}): "
            f"{detail}", status=answer.status, provider_code=code,
            retryable=retryable, **extra)

    def _redirect_error(self, capability: Capability, call: CallContext, path: str,
                        answer: _Answer) -> CapabilityError:
        """A 3xx is never followed: a POST sent on to another address could be carried
        out twice, and the key of a request names it, not where it went."""
        moved = answer.status in _MOVED
        location = answer.headers.get("location")
        fix = redirect_fix(f"{self.base_url}{path}", path, location,
                           "REVISE_PROVIDER_BASE_URL")
        where = self._redact(location) if location else "no address"
        done = ("it did not carry out the request" if moved else "the provider may have "
                "carried out the request (and charged for it)")
        return provider_error(
            capability, call, f"{capability.name}: provider answered HTTP {answer.status}, "
            f"a redirect to {where}; {done}. Revise follows no redirect: {fix}",
            status=answer.status, provider_code="moved" if moved else "bad_response",
            retryable=not moved)

    def _error_detail(self, answer: _Answer) -> tuple[str, str | None]:
        error = (_json_body(answer.body) or {}).get("error")
        if isinstance(error, dict):
            param = error.get("param")
            return self._redact(str(error.get("message") or error)), (
                str(param) if param else None)
        text = answer.body.decode("utf-8", "replace")
        return self._redact(text or answer.reason), None


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: httpx.Headers
    body: bytes  # decoded (Content-Encoding undone), within the adapter's bounds
    reason: str

    @property
    def is_redirect(self) -> bool:
        return 300 <= self.status < 400


def key_header(name: str, key: SecretStr | None) -> dict[str, str]:
    """The header that carries ``key``: ``Authorization: Bearer KEY`` (OpenAI and most
    servers), or the key as it is under any other name (``api-key``: Azure OpenAI)."""
    if key is None or not key.get_secret_value():
        return {}
    value = key.get_secret_value()
    return {name: f"Bearer {value}" if name.lower() == "authorization" else value}


def secrets_of(key: SecretStr | None, extra_headers: Mapping[str, str]) -> list[str]:
    """What a message about a request must never show: the key, the extra headers' values."""
    return [key.get_secret_value() if key is not None else "", *extra_headers.values()]


def redacted(text: str, secrets: Iterable[str], mask: str) -> str:
    """``text`` with each (non-empty) secret replaced by ``mask``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, mask)
    return text


def redirect_fix(url: str, path: str, location: str | None, setting: str) -> str:
    """What to set ``setting`` (a base URL) to after a request to ``url`` (the base URL
    and ``path``) was redirected to ``location``: its address less the same path."""
    if location:
        try:
            target = str(httpx.URL(url).join(location))
        except httpx.InvalidURL:
            target = ""
        if target.endswith(path) and len(target) > len(path):
            return f"set {setting} to {target[:-len(path)]}"
    return f"check {setting}: it must be the address the API itself answers at"


def quota_exhausted(body: bytes) -> bool:
    """A 429 that waiting does not cure: OpenAI's ``insufficient_quota`` (an account with
    no credit left, or none yet), told apart from a rate limit only by its error body."""
    error = (_json_body(body) or {}).get("error")
    return isinstance(error, dict) and QUOTA_EXCEEDED_WORD in (error.get("code"),
                                                               error.get("type"))


def _json_body(body: bytes | str) -> dict[str, Any] | None:
    """The body's JSON object (None: not JSON, or not an object), storable text only."""
    try:
        data = parse_foreign_json(body)
    except (ValueError, RecursionError):  # RecursionError: nested past any real answer
        return None
    return data if isinstance(data, dict) else None


def _counts(data: dict[str, Any]) -> dict[str, Any]:
    """The answer's ``usage`` numbers (and one level of details, as OpenAI's
    ``input_tokens_details``). Usage is informational, so whatever else a provider or
    proxy puts there (a list, text, NaN) is left out rather than failing a paid answer
    or its commit (the store's JSON has no NaN)."""
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return {}
    counts: dict[str, Any] = {}
    for name, value in usage.items():
        if isinstance(value, dict):
            value = {str(k): v for k, v in value.items() if _finite_number(v)} or None
        elif not _finite_number(value):
            value = None
        if value is not None:
            counts[str(name)] = value
    return counts


def _finite_number(value: Any) -> bool:
    """A number the store's JSON keeps: finite, an int within a float's range (a longer
    one makes ``math.isfinite`` raise OverflowError)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _retry_after(headers: httpx.Headers) -> str | None:
    """The wait asked for as whole seconds, rounded up (``retry-after-ms``, or an HTTP
    date, become seconds), so the broker waits at least as long as the provider asked;
    junk is dropped."""
    seconds = wait_asked(headers, now=time.time())
    return None if seconds is None else str(math.ceil(seconds))


def _bad_response(capability: Capability, call: CallContext, why: str) -> CapabilityError:
    return provider_error(capability, call,
                          f"{capability.name}: unusable provider response: {why}",
                          status=None, provider_code="bad_response", retryable=True)


def _base64(encoded: str) -> bytes:
    """Strict base64, but wrapped lines are allowed (MIME style: some gateways wrap it);
    only an answer that fails strictly pays for the second look."""
    try:
        return base64.b64decode(encoded, validate=True)
    except ValueError:  # binascii.Error, or text that is not ASCII
        return base64.b64decode(re.sub(r"[ \t\r\n]+", "", encoded), validate=True)


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return url.scheme, url.host, url.port


def _media_type(data: bytes) -> str:
    if data.startswith(png.PNG_SIGNATURE):
        return png.MEDIA_TYPE
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return "application/octet-stream"


def _own_name(model: str) -> str:
    """The model's own name, past a router's prefix (``openai/gpt-5``), lower-cased."""
    return model.rsplit("/", 1)[-1].lower()


def _answers_in_base64(model: str) -> bool:
    """GPT image models (``gpt-image-1``, ``openai/gpt-image-1`` through a router) always
    answer in base64, and api.openai.com refuses ``response_format`` for them; DALL-E and
    most other servers answer with a URL unless asked for base64."""
    return _own_name(model).startswith("gpt-image")


class OpenAIImagesProvider(_OpenAIAdapter):
    """``POST {base_url}/images/generations``, asking for the image in base64
    (``response_format=b64_json``) where the model needs asking; an answer that gives the
    image's address instead is fetched (``_fetch_image``)."""

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        prompt = payload.get("prompt", "")
        style = payload.get("style")
        size = payload.get("size", "1024x1024")
        model = payload.get("model", "local-image-1")
        body = {"model": self._model(model),
                "prompt": f"{prompt}\nStyle: {style}" if style else prompt,
                "size": size, "n": 1}
        if not _answers_in_base64(body["model"]):
            body["response_format"] = "b64_json"
        data = self._post(capability, call, "/images/generations", body)
        return self._answer(capability, payload, call, data)

    def _answer(self, capability: Capability, payload: dict, call: CallContext,
                data: dict[str, Any]) -> ProviderResult:
        prompt = payload.get("prompt", "")
        size = payload.get("size", "1024x1024")
        model = payload.get("model", "local-image-1")
        ref, image = self._store_image(capability, call, data)
        width, height = self._dimensions(ref, image, size)
        result = {"artifact": ref.to_json(), "width": width, "height": height, "size": size,
                  "model": model, "seed": payload.get("seed"), "prompt": prompt}
        return ProviderResult(result=result, usage={"images": 1, **_counts(data)},
                              cost=capability.unit_price)

    def _store_image(self, capability: Capability, call: CallContext,
                     data: dict[str, Any]) -> tuple[ArtifactRef, bytes]:
        try:
            item = data["data"][0]
            encoded, url = item.get("b64_json"), item.get("url")  # the other one may be null
            if isinstance(encoded, str) and encoded:
                image = _base64(encoded)
            elif isinstance(url, str) and url:
                image = self._fetch_image(capability, call, url)
            else:
                raise ValueError("neither")
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            # binascii.Error is a ValueError
            raise _bad_response(capability, call, "expected data[0].b64_json with base64 "
                                "image bytes, or data[0].url") from None
        try:
            return self.artifacts.put(image, _media_type(image)), image
        except ArtifactTooLarge as exc:  # answered, so maybe charged: not a lost answer
            raise _bad_response(capability, call, exc.message) from None

    def _fetch_image(self, capability: Capability, call: CallContext, url: str) -> bytes:
        """The image a paid answer gives by address (DALL-E's default answer, and servers
        that ignore ``response_format``): a ``data:`` URL is read in place; any other is
        fetched once, within the call's timeout and the artifact limit, and only over
        https or from the provider's own origin (a local server), the API key sent to that
        origin alone, no redirect followed. One that cannot be fetched is an unusable
        answer that may have been charged; its message keeps the address for whoever
        reconciles the call."""
        if url.startswith("data:"):
            meta, _, encoded = url.partition(",")
            if not meta.endswith(";base64"):
                raise ValueError("a data: URL without base64")
            return _base64(encoded)
        shown = self._unsecret(url)

        def unusable(why: str) -> CapabilityError:
            return _bad_response(capability, call, f"the provider answered with the "
                                 f"image's address, {shown[:_MAX_URL]}, which {why}; the "
                                 "call was paid for: fetch the image there and give it to "
                                 "`revise reconcile ... --artifact FILE`")

        try:
            target = httpx.URL(url)
        except httpx.InvalidURL:
            raise unusable("is not a URL") from None
        own = _origin(target) == _origin(httpx.URL(self.base_url))
        if not own and target.scheme != "https":
            raise unusable("is neither https nor on the provider's own address (not "
                           "fetched)")
        headers = self._headers() if own else {"Accept": "image/*",
                                               "Accept-Encoding": ACCEPT_ENCODING}
        try:
            answer = self._send(capability, call, "GET", str(target), self._timeout(call),
                                headers=headers)
        except httpx.HTTPError as exc:
            raise unusable(f"could not be fetched ({type(exc).__name__})") from None
        if answer.status != 200:
            raise unusable(f"answered HTTP {answer.status}")
        kind = answer.headers.get("content-type", "").split(";")[0].strip().lower()
        if kind and not (kind.startswith("image/") or kind in _BYTES_TYPES) \
                and _media_type(answer.body) == "application/octet-stream":
            # An error or sign-in page served with 200 (a CDN, a portal): not the picture
            # (a PNG, JPEG or WebP under a wrong type is still the picture)
            raise unusable(f"answered with {kind[:100]}, not an image")
        return answer.body

    def _dimensions(self, ref: ArtifactRef, image: bytes, size: str
                    ) -> tuple[int | None, int | None]:
        # From the bytes in hand, never read back from the artifact store: that store may
        # be away by now, and the answer is paid.
        if ref.media_type == png.MEDIA_TYPE:
            try:
                return png.decode_size(image)
            except ValueError:  # a PNG signature on a broken header: size unknown
                return None, None
        try:
            width, height = (int(side) for side in size.split("x"))
        except ValueError:
            return None, None
        return width, height


# ---- chat: prompts and reply parsing per capability ------------------------------------------

def _storyboard_messages(payload: dict) -> list[dict[str, Any]]:
    shots = payload.get("shots", 4)
    system = ("You plan storyboards. Reply with only a JSON object "
              f'{{"shots": [...]}} holding exactly {shots} short shot descriptions.')
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Brief: {payload.get('brief', '')}"}]


def _parse_storyboard(reply: str, payload: dict) -> dict[str, Any] | None:
    parsed = _json_object(reply)
    shots = parsed.get("shots") if parsed else None
    if not isinstance(shots, list):
        shots = [re.sub(r"^\s*(?:[-*]|\d+[.)])\s*", "", line).strip()
                 for line in reply.splitlines()]
    shots = [str(shot).strip() for shot in shots if str(shot).strip()]
    return {"shots": shots[: payload.get("shots", 4)]} if shots else None


def _review_messages(payload: dict, image_url: str | None) -> list[dict[str, Any]]:
    system = ('You review images. Reply with only a JSON object {"verdict": "pass" or "fail", '
              '"score": a number from 0 to 1, "notes": one sentence}.')
    text = f"Criteria: {payload.get('criteria', 'matches the prompt')}"
    if image_url:
        content: Any = [{"type": "text", "text": text},
                        {"type": "image_url", "image_url": {"url": image_url}}]
    else:
        content = f"{text}\nImage: {json.dumps(payload.get('image'), sort_keys=True)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def _parse_review(reply: str, payload: dict) -> dict[str, Any] | None:
    parsed = _json_object(reply) or {}
    verdict = str(parsed.get("verdict", "")).lower()
    if verdict not in ("pass", "fail"):
        words = re.findall(r"\b(pass|fail)\b", reply.lower())
        if not words:
            return None
        verdict = words[0]
    try:
        score = min(1.0, max(0.0, float(parsed.get("score", 1.0 if verdict == "pass" else 0.0))))
    except OverflowError:  # an integer past a float's range: past 1 or below 0
        score = 1.0 if str(parsed.get("score")).strip()[:1] != "-" else 0.0
    except (TypeError, ValueError):
        score = 1.0 if verdict == "pass" else 0.0
    return {"verdict": verdict, "score": score, "notes": str(parsed.get("notes") or reply)}


def _text_messages(payload: dict) -> list[dict[str, Any]]:
    messages = [{"role": "system", "content": payload["system"]}] if payload.get("system") \
        else []
    return [*messages, {"role": "user", "content": payload.get("prompt", "")}]


def _json_object(reply: str) -> dict[str, Any] | None:
    text = re.sub(r"^```(?:json)?\s*|\s*```$", "", reply.strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        return None
    return _json_body(text[start:end + 1])


def chat_reply_text(content: Any) -> str:
    """A chat message's content as text: a string as it is; a list of content parts (as
    OpenAI-compatible servers may send) their text joined; none (a refusal, tool calls)
    empty; anything else its JSON, never a Python repr. The model client reads replies
    with it too."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(part["text"] for part in content
                       if isinstance(part, dict) and isinstance(part.get("text"), str))
    return json.dumps(content, sort_keys=True)


def _how_it_ended(choice: dict[str, Any]) -> dict[str, Any]:
    """Why the model stopped (``length``: cut at the token cap; ``content_filter``) and the
    refusal it gave instead of content, if any: a script tells a whole answer from a cut
    one or a refusal (whose content is empty) by them."""
    finish = choice.get("finish_reason")
    ended: dict[str, Any] = {"finish_reason": finish if isinstance(finish, str) else None}
    refusal = choice["message"].get("refusal")
    if isinstance(refusal, str) and refusal:
        ended["refusal"] = refusal
    return ended


Shaper = Callable[[str, dict], dict[str, Any] | None]
_SHAPERS: dict[str, Shaper] = {"text.generate": lambda reply, _p: {"text": reply},
                               "storyboard.plan": _parse_storyboard,
                               "review.visual": _parse_review}


def _unsupported(capability: Capability, call: CallContext) -> None:
    if capability.name not in _SHAPERS:
        raise provider_error(capability, call, f"the chat adapter does not serve "
                             f"{capability.name}", status=400,
                             provider_code="unsupported_capability")


_REASONING_MODELS = re.compile(r"o\d|gpt-(?:[5-9]|\d\d)")


def reasoning_model(model: str) -> bool:
    """OpenAI's reasoning models (o1, o3-mini, gpt-5, gpt-5.4; ``openai/gpt-5`` through a
    router) refuse ``max_tokens`` (they take ``max_completion_tokens``, which older
    servers do not know) and any temperature but the default."""
    return bool(_REASONING_MODELS.match(_own_name(model)))


class OpenAIChatProvider(_OpenAIAdapter):
    """``POST {base_url}/chat/completions`` for text, storyboard and review capabilities."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._takes_completion_tokens: set[str] = set()  # models that refused max_tokens

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        _unsupported(capability, call)
        if capability.name == "text.generate":
            messages = _text_messages(payload)
        elif capability.name == "storyboard.plan":
            messages = _storyboard_messages(payload)
        else:
            messages = _review_messages(payload, self._image_url(capability, call,
                                                                 payload.get("image")))
        model = self._model(payload.get("model", "local-text-1"))
        body: dict[str, Any] = {"model": model, "messages": messages}
        if "max_tokens" in payload:
            renamed = reasoning_model(model) or model in self._takes_completion_tokens
            body["max_completion_tokens" if renamed else "max_tokens"] = payload["max_tokens"]
        try:
            data = self._post(capability, call, "/chat/completions", body)
        except CapabilityError as exc:
            # A model known by another name (an Azure deployment, a router's alias) that
            # refuses max_tokens: the refusal was free, so it is asked again, once.
            if "max_tokens" not in body or exc.status != 400 or \
                    exc.fields.get("param") != "max_tokens":
                raise
            self._takes_completion_tokens.add(model)
            body["max_completion_tokens"] = body.pop("max_tokens")
            data = self._post(capability, call, "/chat/completions", body)
        return self._answer(capability, payload, call, data)

    def _answer(self, capability: Capability, payload: dict, call: CallContext,
                data: dict[str, Any]) -> ProviderResult:
        _unsupported(capability, call)
        shaper = _SHAPERS[capability.name]
        try:
            choice = data["choices"][0]
            reply = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise _bad_response(capability, call,
                                "expected choices[0].message.content") from None
        result = shaper(chat_reply_text(reply), payload)
        if result is None:
            raise _bad_response(capability, call, f"could not read a {capability.name} "
                                "result from the model's reply")
        if capability.name == "text.generate":
            result |= _how_it_ended(choice)
        counts = _counts(data)
        return ProviderResult(result=result, cost=capability.unit_price,
                              usage={"prompt_tokens": counts.get("prompt_tokens", 0),
                                     "completion_tokens": counts.get("completion_tokens", 0)})

    def _image_url(self, capability: Capability, call: CallContext, image: Any) -> str | None:
        """A data URL for an artifact reference we hold, so vision models see the pixels;
        None for anything else (described in text). An artifact that cannot be read is
        a free failure: a review without its picture would be paid for nothing."""
        ref = image.get("artifact", image) if isinstance(image, dict) else image
        if not isinstance(ref, dict | str):
            return None
        try:
            data = self.artifacts.get(ref)
            media_type = ArtifactRef.from_json(ref).media_type if isinstance(ref, dict) \
                else _media_type(data)
        except (ArtifactNotFound, ArtifactCorrupt, StoreUnavailable) as exc:
            raise provider_error(capability, call, f"{capability.name}: the image to review "
                                 f"cannot be read ({exc.message}); nothing was sent",
                                 status=None, provider_code="artifact_unreadable",
                                 retryable=isinstance(exc, StoreUnavailable)) from None
        except ReviseError:
            return None  # not an artifact reference
        return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"

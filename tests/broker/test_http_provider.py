"""HTTP adapters against a real OpenAI-compatible server on 127.0.0.1."""

import base64
import email.utils
import gzip
import json
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from broker import png
from broker.artifacts import MemoryArtifactStore
from broker.catalog import lookup
from broker.charging import Charge, ProviderTerms, charge_of
from broker.errors import CapabilityError, ConfigError
from broker.identity import request_key
from broker.providers import (
    CallContext,
    OpenAIChatProvider,
    OpenAIImagesProvider,
    ProviderLog,
    build_provider,
)
from broker.settings import Settings
from tests.fakes import (
    CHAT,
    FAKE_API_KEY,
    IMAGES,
    FakeOpenAIServer,
    Reply,
    encoded,
    error,
    invalid_size,
    ok_chat,
    ok_image,
    out_of_quota,
    redirect,
    slow,
    trickle,
    unknown_model,
    url_image,
)
from tests.fakes.blob_store import BlobStore

IMAGE = lookup("image.generate")


def ctx(identity: str = "orchestrate/#0@:0", run_id: str = "run-h",
        digest: str = "d") -> CallContext:
    return CallContext(run_id, identity, request_key(run_id, "image.generate", digest))


@pytest.fixture
def server():
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as running:
        yield running


@pytest.fixture
def store() -> MemoryArtifactStore:
    return MemoryArtifactStore()


@contextmanager
def images_at(base_url: str, store: MemoryArtifactStore, *, api_key: Any = FAKE_API_KEY,
              **options: Any) -> Iterator[OpenAIImagesProvider]:
    """An images adapter with ``options``, on an HTTP client of its own."""
    with httpx.Client() as client:
        yield OpenAIImagesProvider(base_url=base_url, api_key=api_key, artifacts=store,
                                   client=client, **options)


@pytest.fixture
def images(server, store):
    with images_at(server.base_url, store, api_key=SecretStr(FAKE_API_KEY),
                   timeout=5.0) as provider:
        yield provider


@pytest.fixture
def chat(server, store):
    with httpx.Client() as client:
        yield OpenAIChatProvider(base_url=server.base_url, api_key=FAKE_API_KEY,
                                 artifacts=store, timeout=5.0, client=client)


def _error(call, *args) -> CapabilityError:
    with pytest.raises(CapabilityError) as caught:
        call(*args)
    return caught.value


def _assert_no_key(err: CapabilityError) -> None:
    assert FAKE_API_KEY not in str(err)
    assert FAKE_API_KEY not in json.dumps(err.fields, default=str)
    assert FAKE_API_KEY not in repr(err.to_json())


# ---- images ----------------------------------------------------------------------------------

def test_image_ok_stores_decoded_png(server, images, store):
    data = png.render(b"server image", 24, 16)
    server.queue(IMAGES, ok_image(data))
    out = images.execute(IMAGE, {"prompt": "fox", "size": "1536x1024"}, ctx())
    assert store.get(out.result["artifact"]) == data
    assert out.result["artifact"]["media_type"] == "image/png"
    assert (out.result["width"], out.result["height"]) == (24, 16)
    assert out.result["prompt"] == "fox" and out.result["size"] == "1536x1024"
    assert out.cost == IMAGE.unit_price and out.usage["images"] == 1
    (request,) = server.requests
    assert request.path == IMAGES
    assert request.body == {"model": "local-image-1", "prompt": "fox", "size": "1536x1024",
                            "n": 1, "response_format": "b64_json"}
    assert request.headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    assert request.headers["idempotency-key"] == ctx().idempotency_key
    assert FAKE_API_KEY not in json.dumps(out.result)


@pytest.mark.parametrize("model, asks", [
    ("gpt-image-1", False), ("openai/gpt-image-1", False), ("GPT-Image-1-mini", False),
    ("dall-e-3", True), ("local-image-1", True)])
def test_base64_is_asked_for_only_where_the_model_needs_asking(server, images, model, asks):
    """The fake refuses response_format for GPT image models, as api.openai.com does: every
    image call to them was a 400 (free, and nothing drawn)."""
    out = images.execute(IMAGE, {"prompt": "fox", "model": model}, ctx())
    assert out.result["model"] == model
    assert ("response_format" in server.requests[-1].body) is asks


def test_each_request_carries_the_key_the_broker_gave_it(server, images):
    server.queue(IMAGES, error(500))
    with pytest.raises(CapabilityError) as caught:
        images.execute(IMAGE, {"prompt": "fox"}, ctx("s@:0"))
    assert caught.value.retryable
    images.execute(IMAGE, {"prompt": "fox"}, ctx("s@:0"))  # the same request again
    images.execute(IMAGE, {"prompt": "fox"}, ctx("s@:1"))  # the same request elsewhere
    images.execute(IMAGE, {"prompt": "owl"}, ctx("s@:0", digest="other"))
    keys = [r.headers["idempotency-key"] for r in server.requests_to(IMAGES)]
    assert keys[0] == keys[1] == keys[2] == ctx("s@:0").idempotency_key
    assert keys[3] != keys[0]


@pytest.mark.parametrize(("behaviour", "status", "code", "retryable"), [
    (invalid_size(), 400, "invalid_parameter", False),
    (error(401), 401, "auth", False),
    (error(403, f"key {FAKE_API_KEY} lacks access"), 403, "auth", False),
    (unknown_model(), 404, "model_not_found", False),
    (error(429, "slow down", headers={"Retry-After": "2"}), 429, "rate_limited", True),
    (error(500), 500, "provider_error", True),
    (error(503), 503, "provider_error", True),
], ids=["400", "401", "403", "404", "429", "500", "503"])
def test_error_mapping(server, images, behaviour, status, code, retryable):
    server.queue(IMAGES, behaviour)
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx("s@:2"))
    assert (err.status, err.provider_code, err.retryable) == (status, code, retryable)
    assert err.capability == "image.generate" and err.identity == "s@:2"
    _assert_no_key(err)
    if status == 429:
        assert err.retry_after == "2"


def test_a_429_out_of_quota_is_free_and_not_a_rate_limit(server, images):
    """Both are 429s; only the body tells OpenAI's "no credit left" from a rate limit, and
    waiting for the first would hold every call to the provider for nothing."""
    server.queue(IMAGES, out_of_quota(), error(429, "slow down"))
    quota = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (quota.status, quota.provider_code) == (429, "quota_exceeded")
    assert charge_of(quota, ProviderTerms()).charge is Charge.FREE
    assert "out of quota" in quota.message and "billing" in quota.message
    limited = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert charge_of(limited, ProviderTerms()).charge is Charge.RATE_LIMITED


def test_server_side_validation_by_default(server, images):
    err = _error(images.execute, IMAGE, {"prompt": "fox", "size": "999x999"}, ctx())
    assert (err.status, err.provider_code, err.param) == (400, "invalid_parameter", "size")
    assert "size" in err.message
    err = _error(images.execute, IMAGE, {"prompt": "fox", "model": "missing-model"}, ctx())
    assert err.provider_code == "model_not_found"


def test_wrong_key_is_auth_error_without_the_key(server, store):
    wrong = "sk-wrong-secret-value-123"
    with images_at(server.base_url, store, api_key=wrong) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code) == (401, "auth")
    assert wrong not in str(err) and wrong not in json.dumps(err.fields, default=str)


def test_timeout_is_retryable_and_warns_of_completion(server, store):
    server.queue(IMAGES, slow(3.0))
    with images_at(server.base_url, store, timeout=0.3) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code, err.retryable) == (None, "timeout", True)
    assert "may have completed" in err.message
    _assert_no_key(err)


def test_the_envelope_call_timeout_bounds_one_request(server, store):
    server.queue(IMAGES, slow(3.0))
    with images_at(server.base_url, store, timeout=30.0) as provider:
        call = CallContext("run-h", "orchestrate/#0@:0", "revise-k", timeout_seconds=0.3)
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, call)
    assert (err.provider_code, err.retryable) == ("timeout", True)
    assert "within 0.3s" in err.message


@pytest.mark.parametrize(("status", "code", "charge"), [
    (301, "moved", Charge.FREE), (307, "moved", Charge.FREE), (308, "moved", Charge.FREE),
    (302, "bad_response", Charge.MAYBE), (303, "bad_response", Charge.MAYBE),
])
def test_a_redirect_is_never_followed_and_names_the_base_url(server, images, status,
                                                              code, charge):
    """An API that moved (an http:// base URL that its host sends to https://) did
    nothing; a "done, see there" may follow work done. Neither is followed: a POST sent on
    could be carried out twice. The error names the base URL to set."""
    server.queue(IMAGES, redirect(status, "https://api.example.test/v2/images/generations",
                                  done=status in (302, 303)))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code) == (status, code)
    assert charge_of(err, ProviderTerms()).charge is charge
    assert "set REVISE_PROVIDER_BASE_URL to https://api.example.test/v2" in err.message
    assert len(server.requests_to(IMAGES)) == 1 and len(server.requests) == 1
    _assert_no_key(err)


def test_a_relative_or_missing_redirect_address_still_says_what_to_set(server, images):
    server.queue(IMAGES, redirect(308, "/v2/images/generations"), redirect(301, None))
    relative = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    host = server.base_url.rsplit("/", 1)[0]
    assert f"set REVISE_PROVIDER_BASE_URL to {host}/v2;" in relative.message + ";"
    nowhere = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert "redirect to no address" in nowhere.message
    assert "check REVISE_PROVIDER_BASE_URL" in nowhere.message
    assert server.charged() == 0


def test_a_redirected_lookup_is_not_a_record_of_nothing(server, store):
    """A lookup answered with a redirect has not said "no record" (which would let the
    call be asked again): it fails."""
    server.queue(f"{server.prefix}/requests/{ctx().idempotency_key}",
                 redirect(308, "https://elsewhere.test/v1/requests/k"))
    with images_at(server.base_url, store, lookup_path="/requests/{key}") as provider:
        err = _error(provider.lookup, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code) == (308, "moved")


def test_a_base_url_without_the_api_prefix_is_named_in_the_404(server, store, images):
    with images_at(server.base_url.removesuffix("/v1"), store) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code) == (404, "model_not_found")
    assert "check that REVISE_PROVIDER_BASE_URL holds the API's prefix" in err.message
    unknown = _error(images.execute, IMAGE, {"prompt": "fox", "model": "missing-model"}, ctx())
    assert "REVISE_PROVIDER_BASE_URL" not in unknown.message  # the model is what is unknown


def test_connection_refused_is_retryable(store):
    with images_at("http://127.0.0.1:9/v1", store, timeout=2.0) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "connection_error" and err.retryable
    _assert_no_key(err)


def test_garbage_image_response_is_bad_response(server, images):
    server.queue(IMAGES, lambda request, server: Reply(200, {"data": [{"url": "x"}]}))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response"


def test_an_image_answered_by_address_is_fetched_and_stored(server, images, store):
    """DALL-E answers with a URL unless asked otherwise, and some servers ignore the ask:
    the answer is paid, so the image there is fetched (on the provider's own origin, with
    its key) and stored like one sent in base64."""
    server.queue(IMAGES, url_image())
    out = images.execute(IMAGE, {"prompt": "fox"}, ctx())
    (path,) = server.files
    assert store.get(out.result["artifact"]["id"]) == server.files[path]
    (fetch,) = server.requests_to(path)
    assert fetch.method == "GET" and fetch.headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    assert (out.result["width"], out.result["height"]) == (8, 8)


def test_an_image_on_another_host_is_fetched_without_the_key(server, store):
    with BlobStore() as blobs, httpx.Client(verify=blobs.ssl_context()) as client:
        server.queue(IMAGES, url_image(blobs.put))
        provider = OpenAIImagesProvider(base_url=server.base_url, api_key=FAKE_API_KEY,
                                        artifacts=store, client=client)
        out = provider.execute(IMAGE, {"prompt": "fox"}, ctx())
        (data,) = blobs.files.values()
        assert store.get(out.result["artifact"]["id"]) == data
        (headers,) = blobs.requests
        assert "authorization" not in headers
        assert FAKE_API_KEY not in json.dumps(headers)


def test_a_data_url_image_is_read_in_place(server, images, store):
    """Next to a null b64_json too (servers that send both fields, one of them empty)."""
    image = png.render(b"data", 4)
    url = "data:image/png;base64," + base64.b64encode(image).decode()
    server.queue(IMAGES, lambda request, server: Reply(
        200, {"data": [{"b64_json": None, "url": url}]}))
    out = images.execute(IMAGE, {"prompt": "fox"}, ctx())
    assert store.get(out.result["artifact"]["id"]) == image


@pytest.mark.parametrize(("place", "why"), [
    (lambda path, data: "http://localhost:9" + path, "neither https nor"),
    (lambda path, data: "ftp://127.0.0.1/x.png", "neither https nor"),
    (lambda path, data: "https://127.0.0.1:9/x.png", "could not be fetched (ConnectError)"),
    (lambda path, data: "http://[::1", "is not a URL"),
], ids=["plain http elsewhere", "another scheme", "unreachable", "not a URL"])
def test_an_image_address_that_cannot_be_used_is_a_paid_unusable_answer(
        server, images, place, why):
    """Plain http is fetched only from the provider's own origin (an address in a paid
    answer is not a way into the worker's network); what cannot be fetched stays paid
    until an operator says otherwise, and the message keeps the address for them."""
    server.queue(IMAGES, url_image(place))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response" and why in err.message
    assert charge_of(err, ProviderTerms()).charge is Charge.MAYBE
    assert "revise reconcile" in err.message
    assert [r.method for r in server.requests] == ["POST"]


def test_an_image_address_answering_an_error_is_a_paid_unusable_answer(server, images):
    server.queue(IMAGES, url_image(lambda path, data: server.base_url + "/files/gone.png"))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert "answered HTTP 404" in err.message and "/files/gone.png" in err.message
    assert charge_of(err, ProviderTerms()).charge is Charge.MAYBE


def test_an_error_answered_with_200_is_named_and_maybe_charged(server, images):
    """Some gateways pass an upstream failure on as 200 with an error object."""
    server.queue(IMAGES, lambda request, server: Reply(200, {"error": {
        "message": "upstream timed out", "type": "server_error"}}))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response"
    assert "HTTP 200 carrying an error: upstream timed out" in err.message
    assert charge_of(err, ProviderTerms()).charge is Charge.MAYBE


def test_an_answer_still_arriving_at_the_timeout_is_a_timeout(server, store):
    """Every 16-byte piece comes well within the read timeout, the whole answer does not:
    the call ends at its timeout, and the provider (which did the work) may have charged."""
    server.queue(IMAGES, trickle(0.05, then=ok_image()))  # about 30 pieces: 1.5 s
    with images_at(server.base_url, store, timeout=0.4) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code, err.retryable) == (None, "timeout", True)
    assert "still arriving after 0.4s" in err.message
    assert server.charged() == 1


def test_an_answer_larger_than_any_artifact_is_cut_off(server):
    store = MemoryArtifactStore(max_bytes=3000)
    endless = b'{"data": [{"b64_json": "' + b"A" * (8 << 20) + b'"}]}'
    server.queue(IMAGES, lambda request, server: Reply(200, None, raw=endless))
    with images_at(server.base_url, store) as provider:
        assert provider.answer_bytes == 4000 + (1 << 20)
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response"  # answered: it may have been charged
    assert f"over {provider.answer_bytes} bytes" in err.message
    assert "REVISE_ARTIFACT_MAX_BYTES" in err.message


def test_a_compressed_answer_is_read_and_only_encodings_asked_for_are(server, images):
    server.queue(IMAGES, encoded("gzip", gzip.compress, ok_image()))
    assert images.execute(IMAGE, {"prompt": "fox"}, ctx()).result["artifact"]["bytes"] > 0
    assert server.requests[-1].headers["accept-encoding"] == "gzip, deflate"
    server.queue(IMAGES, encoded("br", lambda raw: raw, ok_image()))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response" and "'br' is not one asked for" in err.message
    server.queue(IMAGES, encoded("gzip", lambda raw: raw, error(503, "upstream down")))
    assert _error(images.execute, IMAGE, {"prompt": "fox"}, ctx()).status == 503


def test_a_compression_bomb_is_never_inflated_past_the_answer_limit(server):
    """256 MiB of zeros in 250 KiB of gzip: httpx inflated each 64 KiB network chunk
    whole (64 MiB at once) before the size was counted; now no more than the limit."""
    bomb = gzip.compress(b"\0" * (256 << 20), 9)
    server.queue(IMAGES, lambda request, server: Reply(
        200, None, raw=bomb, headers={"Content-Encoding": "gzip"}))
    with images_at(server.base_url, MemoryArtifactStore(max_bytes=3000)) as provider:
        tracemalloc.start()
        try:
            err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert err.provider_code == "bad_response"  # answered: it may have been charged
    assert f"over {provider.answer_bytes} bytes" in err.message
    assert peak < 8 * provider.answer_bytes, peak  # about 1 MiB; it was over 64 MiB


def test_an_image_over_the_artifact_limit_is_a_bad_response(server):
    store = MemoryArtifactStore(max_bytes=100)
    server.queue(IMAGES, ok_image(png.render(b"big", 32, 32)))
    with images_at(server.base_url, store) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "bad_response"
    assert "over the limit of 100 bytes" in err.message and "REVISE_ARTIFACT_MAX_BYTES" \
        in err.message


def test_a_huge_error_page_is_read_only_as_far_as_its_message(server, images):
    page = b"<html>" + b"x" * (8 << 20) + b"</html>"
    server.queue(IMAGES, lambda request, server: Reply(
        503, None, raw=page, headers={"Content-Type": "text/html"}))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code) == (503, "provider_error")
    assert "<html>xxx" in err.message and len(err.message) < 500


def test_an_error_answer_still_arriving_at_the_timeout_keeps_its_status(server, store):
    """A refusal is free whatever its body does: a 400 trickled past the timeout is read
    as far as it came, never turned into a timeout (which may have been charged)."""
    refusal = error(400, "the prompt was refused " + "x" * 400)
    server.queue(IMAGES, trickle(0.05, then=refusal))
    with images_at(server.base_url, store, timeout=0.4) as provider:
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert (err.status, err.provider_code, err.retryable) == (400, "invalid_parameter", False)


def test_a_retry_after_date_becomes_seconds(server, images):
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    server.queue(IMAGES, error(429, "slow down", headers={"Retry-After": when}))
    err = _error(images.execute, IMAGE, {"prompt": "fox"}, ctx())
    assert err.provider_code == "rate_limited"
    assert 28 <= int(err.retry_after) <= 31


@pytest.mark.parametrize("headers, passed_on", [
    ({"Retry-After": "2.5"}, "3"), ({"Retry-After": "nan"}, None),
    ({"Retry-After": "-5"}, None), ({"Retry-After": "in a while"}, None),
    ({"Retry-After": "20", "retry-after-ms": "1200"}, "2"),
    ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m0.2s"}, "61")])
def test_retry_after_is_passed_on_as_whole_seconds_rounded_up(server, images, headers,
                                                              passed_on):
    """Never a shorter wait than asked; junk is dropped (the broker then waits 1 s);
    OpenAI's retry-after-ms comes first."""
    server.queue(IMAGES, error(429, "slow down", headers=headers))
    assert _error(images.execute, IMAGE, {"prompt": "fox"}, ctx()).retry_after == passed_on


@pytest.mark.parametrize("usage, kept", [
    ([1, 2], {}), ("many", {}), (None, {}),
    ({"total_tokens": 9, "odd": float("nan"), "note": "x", "flag": True,
      "input_tokens_details": {"image_tokens": 4, "text": "y"}, "bad": {"x": "y"}},
     {"total_tokens": 9, "input_tokens_details": {"image_tokens": 4}}),
], ids=["list", "text", "null", "mixed"])
def test_usage_keeps_only_its_numbers(server, images, chat, usage, kept):
    """Usage is informational: an odd one never fails a paid answer or its commit."""
    image = ok_image()
    server.queue(IMAGES, lambda request, server: Reply(
        200, {**image(request, server).body, "usage": usage}))
    assert images.execute(IMAGE, {"prompt": "fox"}, ctx()).usage == {"images": 1, **kept}
    server.queue(CHAT, lambda request, server: Reply(200, {
        "choices": [{"message": {"content": "hi"}}],
        "usage": usage if not isinstance(usage, dict) else {"prompt_tokens": "3",
                                                            "completion_tokens": 2}}))
    out = chat.execute(lookup("text.generate"), {"prompt": "x"}, ctx())
    assert out.usage["prompt_tokens"] == 0
    assert out.usage["completion_tokens"] == (2 if isinstance(usage, dict) else 0)


def test_an_integer_longer_than_python_reads_never_makes_a_paid_answer_unusable(
        server, images, store):
    """Python reads at most 4300 digits into an int: one longer number in the answer made
    all of it "not JSON", a paid picture uncertain. It stays its digits (then left out
    of the usage, which keeps numbers only)."""
    image = ok_image()

    def huge(request, server):
        body = json.dumps({**image(request, server).body, "usage": {"total_tokens": 0}})
        return Reply(200, None, raw=body.replace('"total_tokens": 0',
                                                 '"total_tokens": ' + "9" * 5000).encode())
    server.queue(IMAGES, huge)
    out = images.execute(IMAGE, {"prompt": "fox"}, ctx())
    assert store.exists(out.result["artifact"]["id"]) and out.usage == {"images": 1}


def test_a_lone_surrogate_in_an_answer_becomes_a_replacement_character(server, chat):
    """JSON may escape half a surrogate pair, which no UTF-8 text (a hash, a store) can
    hold: it is replaced wherever it lands, in the answer or in the reply's own JSON."""
    server.queue(CHAT, ok_chat("a \ud800 b \U0001f600"))
    out = chat.execute(lookup("text.generate"), {"prompt": "x"}, ctx())
    assert out.result["text"] == "a \ufffd b \U0001f600"
    server.queue(CHAT, ok_chat('{"shots": ["one \\udc00", "two"]}'))
    out = chat.execute(lookup("storyboard.plan"), {"brief": "b", "shots": 2}, ctx())
    assert out.result == {"shots": ["one \ufffd", "two"]}


def test_an_answer_nested_past_any_real_one_is_a_bad_response(server, images):
    deep = b'{"data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    server.queue(IMAGES, lambda request, server: Reply(200, None, raw=deep))
    assert _error(images.execute, IMAGE, {"prompt": "fox"}, ctx()).provider_code \
        == "bad_response"


def test_base64_wrapped_in_lines_is_read(server, images, store):
    data = png.render(b"wrapped", 24, 16)
    encoded = base64.encodebytes(data).decode("ascii")  # 76 characters a line
    assert "\n" in encoded.strip()
    server.queue(IMAGES, lambda request, server: Reply(200, {"data": [{"b64_json": encoded}]}))
    out = images.execute(IMAGE, {"prompt": "fox"}, ctx())
    assert store.get(out.result["artifact"]) == data


def test_a_png_with_a_broken_header_is_kept_without_its_size(server, images, store):
    broken = png.PNG_SIGNATURE + b"\0\0\0\rIHDX" + b"\0" * 16
    server.queue(IMAGES, ok_image(broken))
    out = images.execute(IMAGE, {"prompt": "fox", "size": "512x512"}, ctx())
    assert (out.result["width"], out.result["height"]) == (None, None)
    assert store.get(out.result["artifact"]) == broken


@pytest.mark.parametrize("encoded", ["ünïcode", "***", 5, None], ids=repr)
def test_an_image_that_is_not_base64_is_a_bad_response(server, images, encoded):
    server.queue(IMAGES, lambda request, server: Reply(200, {"data": [{"b64_json": encoded}]}))
    assert _error(images.execute, IMAGE, {"prompt": "fox"}, ctx()).provider_code \
        == "bad_response"


def test_model_alias_maps_catalog_names(server, store):
    with images_at(server.base_url, store,
                   models={"local-image-1": "gpt-image-1"}) as provider:
        provider.execute(IMAGE, {"prompt": "fox"}, ctx())
    assert server.requests[0].body["model"] == "gpt-image-1"


# ---- chat ------------------------------------------------------------------------------------

def test_text_generate(server, chat):
    server.queue(CHAT, ok_chat("Hello there.", prompt_tokens=3, completion_tokens=2))
    out = chat.execute(lookup("text.generate"),
                       {"prompt": "greet", "system": "be brief", "max_tokens": 10}, ctx())
    assert out.result == {"text": "Hello there.", "finish_reason": "stop"}
    assert out.usage == {"prompt_tokens": 3, "completion_tokens": 2}
    (request,) = server.requests
    assert request.path == CHAT
    assert request.body["messages"] == [{"role": "system", "content": "be brief"},
                                        {"role": "user", "content": "greet"}]
    assert request.body["max_tokens"] == 10
    assert request.headers["idempotency-key"] == ctx().idempotency_key


@pytest.mark.parametrize(("choice", "ended"), [
    ({"finish_reason": "length", "message": {"content": "Once upon a"}},
     {"text": "Once upon a", "finish_reason": "length"}),
    ({"finish_reason": "stop", "message": {"content": None, "refusal": "I can't help."}},
     {"text": "", "finish_reason": "stop", "refusal": "I can't help."}),
    ({"message": {"content": "hi", "refusal": None}}, {"text": "hi", "finish_reason": None}),
], ids=["cut at the cap", "a refusal", "no reason given"])
def test_a_text_says_how_the_model_ended_it(server, chat, choice, ended):
    """A refusal comes with empty content: the text alone reads as an empty answer."""
    server.queue(CHAT, lambda request, server: Reply(200, {"choices": [choice]}))
    assert chat.execute(lookup("text.generate"), {"prompt": "x"}, ctx()).result == ended


@pytest.mark.parametrize("content, text", [
    ([{"type": "text", "text": "Hello "}, {"type": "image_url", "image_url": {}},
      {"type": "text", "text": "there."}], "Hello there."),
    (None, ""), ({"a": 1}, '{"a": 1}'), (7, "7")])
def test_a_reply_in_content_parts_is_its_text(server, chat, content, text):
    """Content parts (some OpenAI-compatible servers) were committed as their Python repr,
    "[{'type': 'text', ...}]": the script got that as its paid text."""
    server.queue(CHAT, lambda request, server: Reply(
        200, {"choices": [{"message": {"role": "assistant", "content": content}}]}))
    assert chat.execute(lookup("text.generate"), {"prompt": "x"}, ctx()).result["text"] == \
        text


@pytest.mark.parametrize("model, cap", [
    ("gpt-5", "max_completion_tokens"), ("openai/o3-mini", "max_completion_tokens"),
    ("gpt-5.4-mini", "max_completion_tokens"), ("gpt-4o", "max_tokens"),
    ("local-text-1", "max_tokens")])
def test_the_token_cap_goes_in_the_field_the_model_takes(server, chat, model, cap):
    """The fake refuses max_tokens for reasoning models, as api.openai.com does: every
    text call to gpt-5 was a 400."""
    out = chat.execute(lookup("text.generate"), {"prompt": "x", "model": model,
                                                 "max_tokens": 256}, ctx())
    assert out.result["text"].startswith("echo:")
    assert server.requests[-1].body[cap] == 256


def test_a_model_that_refuses_max_tokens_under_another_name_is_asked_again(server, chat):
    """An Azure deployment (or a router's alias) of a reasoning model has a name no rule
    knows: its free refusal of max_tokens is answered by asking again with
    max_completion_tokens, once, and later calls ask that way from the start."""
    server.queue(CHAT, error(400, "Unsupported parameter: 'max_tokens' is not supported with "
                             "this model. Use 'max_completion_tokens' instead.",
                             param="max_tokens"))
    payload = {"prompt": "x", "model": "prod-deployment", "max_tokens": 50}
    assert chat.execute(lookup("text.generate"), payload, ctx()).result["text"]
    chat.execute(lookup("text.generate"), payload, ctx("o@:1"))
    caps = [sorted(set(r.body) & {"max_tokens", "max_completion_tokens"})
            for r in server.requests_to(CHAT)]
    assert caps == [["max_tokens"], ["max_completion_tokens"], ["max_completion_tokens"]]
    assert server.charged() == 2
    server.queue(CHAT, error(400, "bad temperature", param="temperature"))
    err = _error(chat.execute, lookup("text.generate"), {**payload, "model": "other"}, ctx())
    assert err.status == 400 and len(server.requests_to(CHAT)) == 4  # other refusals stand


def test_storyboard_plan_parses_json_and_lists(server, chat):
    cap = lookup("storyboard.plan")
    server.queue(CHAT, ok_chat('```json\n{"shots": ["wide", "close", "extra"]}\n```'),
                      ok_chat("1. wide\n2) close\n- detail"))
    out = chat.execute(cap, {"brief": "a lighthouse", "shots": 2}, ctx())
    assert out.result == {"shots": ["wide", "close"]}
    out = chat.execute(cap, {"brief": "a lighthouse", "shots": 3}, ctx())
    assert out.result == {"shots": ["wide", "close", "detail"]}
    assert "exactly 2" in server.requests[0].body["messages"][0]["content"]


def test_review_visual_parses_verdict_and_sends_image(server, chat, store):
    ref = store.put(png.render(b"img", 8), "image/png")
    server.queue(CHAT, ok_chat('{"verdict": "fail", "score": 0.25, "notes": "blurry"}'),
                      ok_chat("I would say this is a PASS overall"))
    cap = lookup("review.visual")
    out = chat.execute(cap, {"image": {"artifact": ref.to_json()}}, ctx())
    assert out.result == {"verdict": "fail", "score": 0.25, "notes": "blurry"}
    content = server.requests[0].body["messages"][1]["content"]
    assert content[1]["image_url"]["url"].startswith("data:image/png;base64,")
    out = chat.execute(cap, {"image": "not-an-artifact"}, ctx())
    assert out.result["verdict"] == "pass"


def test_a_review_whose_image_cannot_be_read_is_not_sent(server, chat):
    """A review without its picture would be paid for nothing: a free failure instead."""
    from broker.charging import Charge, ProviderTerms, charge_of

    missing = {"id": "sha256:" + "ab" * 32, "media_type": "image/png", "bytes": 10}
    for image in ({"artifact": missing}, missing["id"]):
        err = _error(chat.execute, lookup("review.visual"), {"image": image}, ctx())
        assert err.provider_code == "artifact_unreadable" and "nothing was sent" in str(err)
        assert charge_of(err, ProviderTerms()).charge is Charge.FREE
    assert server.requests_to(CHAT) == []


def test_unparseable_review_is_bad_response(server, chat):
    server.queue(CHAT, ok_chat("no idea"))
    err = _error(chat.execute, lookup("review.visual"), {"image": "x"}, ctx())
    assert err.provider_code == "bad_response" and err.retryable


def test_chat_errors_map_too(server, chat):
    server.queue(CHAT, error(429))
    err = _error(chat.execute, lookup("text.generate"), {"prompt": "p"}, ctx())
    assert (err.status, err.provider_code, err.retryable) == (429, "rate_limited", True)


# ---- factory in http mode ----------------------------------------------------------------------

def test_build_provider_http_routes_and_logs_without_credentials(server, tmp_path):
    settings = Settings(home=tmp_path, provider="http", provider_base_url=server.base_url,
                        provider_api_key=FAKE_API_KEY, provider_timeout_seconds=5)
    store = MemoryArtifactStore()
    with httpx.Client() as client:
        provider = build_provider(settings, store, client=client)
        out = provider.execute(IMAGE, {"prompt": "fox"}, ctx("a@:0"))
        provider.execute(lookup("text.generate"), {"prompt": "hi"}, ctx("b@:0"))
        server.queue(IMAGES, error(403))
        with pytest.raises(CapabilityError):
            provider.execute(IMAGE, {"prompt": "fox"}, ctx("c@:0"))
        dry = provider.execute(lookup("audio.generate"), {"text": "hi"}, ctx("d@:0"))
    assert store.exists(out.result["artifact"]["id"]) and dry.result["dry_run"]
    assert [r.path for r in server.requests] == [IMAGES, CHAT, IMAGES]
    log_text = settings.provider_log_path.read_text()
    assert FAKE_API_KEY not in log_text
    entries = ProviderLog(settings.provider_log_path).read()
    assert [(e["outcome"], e["provider"], e["error_code"]) for e in entries] == [
        ("ok", "http", None), ("ok", "http", None), ("error", "http", "auth"),
        ("ok", "dry-run", None)]


def test_the_key_goes_in_the_header_the_provider_reads(tmp_path):
    """Azure OpenAI reads its key from ``api-key``, as it is; a key sent as a bearer token
    there is refused (and the other way round)."""
    with FakeOpenAIServer(api_key=FAKE_API_KEY, key_header="api-key") as azure:
        settings = Settings(home=tmp_path, provider="http", provider_base_url=azure.base_url,
                            provider_api_key=FAKE_API_KEY, provider_api_key_header="api-key")
        with httpx.Client() as client:
            provider = build_provider(settings, MemoryArtifactStore(), client=client)
            provider.execute(IMAGE, {"prompt": "fox"}, ctx("a@:0"))
            provider.execute(lookup("text.generate"), {"prompt": "hi"}, ctx("b@:0"))
            bearer = build_provider(settings.model_copy(
                update={"provider_api_key_header": "Authorization"}), MemoryArtifactStore(),
                client=client)
            err = _error(bearer.execute, IMAGE, {"prompt": "fox"}, ctx("c@:0"))
        assert err.provider_code == "auth"
        sent = [(r.headers.get("api-key"), r.headers.get("authorization"))
                for r in azure.requests]
        assert sent == [(FAKE_API_KEY, None), (FAKE_API_KEY, None),
                        (None, f"Bearer {FAKE_API_KEY}")]


def test_a_gateway_s_own_headers_go_with_every_request_and_nowhere_else(tmp_path):
    """REVISE_PROVIDER_HEADERS (a gateway's key) go to the provider with each call and
    lookup, never into a message, and never to another host an image is fetched from."""
    gateway = '{"Helicone-Auth": "Bearer sk-gateway-secret"}'
    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server, BlobStore() as blobs, \
            httpx.Client(verify=blobs.ssl_context()) as client:
        settings = Settings(home=tmp_path, provider="http", provider_base_url=server.base_url,
                            provider_api_key=FAKE_API_KEY, provider_headers=gateway)
        provider = build_provider(settings, MemoryArtifactStore(), client=client)
        server.queue(IMAGES, url_image(blobs.put),
                     error(400, "unknown header value Bearer sk-gateway-secret"))
        provider.execute(IMAGE, {"prompt": "fox"}, ctx("a@:0"))
        err = _error(provider.execute, IMAGE, {"prompt": "fox"}, ctx("b@:0"))
    assert [r.headers["helicone-auth"] for r in server.requests] == [
        "Bearer sk-gateway-secret"] * 2
    assert all(r.headers["authorization"] == f"Bearer {FAKE_API_KEY}" for r in server.requests)
    assert "sk-gateway-secret" not in err.message and "[redacted]" in err.message
    (fetch,) = blobs.requests
    assert "helicone-auth" not in fetch and "authorization" not in fetch


def test_build_provider_http_needs_base_url(tmp_path):
    with pytest.raises(ConfigError, match="REVISE_PROVIDER_BASE_URL"):
        build_provider(Settings(home=tmp_path, provider="http"), MemoryArtifactStore())

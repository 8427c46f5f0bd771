"""Model backends: script extraction, the JSONL replayer, the OpenAI-compatible adapter."""

from __future__ import annotations

import email.utils
import gzip
import io
import json
import time
from pathlib import Path

import pytest
from rich.console import Console

from broker.errors import ConfigError, InputError, ReviseError
from broker.settings import Settings
from orchestrator.models import (
    ModelBackend,
    ModelEndpointError,
    OpenAIChatBackend,
    RecordedBackend,
    Waiting,
    backend_from_spec,
    extract_script,
    parse_jsonl,
)
from tests.fakes.model_server import FAKE_API_KEY, ModelServer
from tests.fakes.openai_server import (
    CHAT,
    encoded,
    error,
    html_page,
    ok_chat,
    out_of_quota,
    redirect,
    slow,
    trickle,
    truncated_chat,
)

SCRIPT = 'async def orchestrate(ctx, args):\n    return await ctx.run("text.generate", ' \
         '{"prompt": "hi"})\n'
OLD = "async def orchestrate(ctx, args):\n    return 1\n"
MESSAGES = [{"role": "user", "content": "write a script"}]


# ---- extract_script ----------------------------------------------------------------------------

@pytest.mark.parametrize("answer", [
    f"```python\n{SCRIPT}```",
    f"Here is the script:\n\n```python\n{SCRIPT}```\n\nIt calls text.generate once.",
    f"```py\n{SCRIPT}```",
    f"```\n{SCRIPT}```",
    f"~~~python\n{SCRIPT}~~~",
    f"  ```python\n{SCRIPT}  ```\n",
    f"```python title=repair.py\n{SCRIPT}```",
    f"<think>the size is wrong; ```python\nx = 1\n```</think>\n```python\n{SCRIPT}```",
    f"```python\r\n{SCRIPT.replace(chr(10), chr(13) + chr(10))}```",
    f"Unfenced answer, prose first.\n{SCRIPT}",
    f"{SCRIPT}\nThis version keeps the committed call.",
    SCRIPT,
])
def test_extract_script_finds_the_script(answer: str) -> None:
    assert extract_script(answer) == SCRIPT


def test_extract_prefers_the_last_block_that_defines_orchestrate() -> None:
    answer = (f"The original was:\n```python\n{OLD}```\nA helper:\n```python\ndef f(x):\n"
              f"    return x\n```\nThe fix:\n```python\n{SCRIPT}```\n```bash\nrevise run\n```")
    assert extract_script(answer) == SCRIPT


def test_extract_never_takes_the_failed_script_over_another() -> None:
    """Some models show the fix first and the original "for reference" after it."""
    answer = (f"The repaired script:\n```python\n{SCRIPT}```\nFor reference, the original:"
              f"\n```python\n{OLD.replace(chr(10), '  ' + chr(10))}```\n")
    assert extract_script(answer) != SCRIPT  # without knowing which one failed: the last
    assert extract_script(answer, failed=OLD) == SCRIPT
    # The failed script alone is a retry (a transient failure may need one): taken.
    assert extract_script(f"```python\n{OLD}```", failed=OLD) == OLD


def test_extract_takes_a_list_item_s_indent_off_its_block() -> None:
    indented = "".join(f"   {line}\n" if line else "\n" for line in SCRIPT.split("\n")[:-1])
    assert extract_script(f"1. Replace it with:\n\n   ```python\n{indented}   ```\n") == SCRIPT


def test_extract_handles_longer_fences_around_inner_fences() -> None:
    inner = SCRIPT.replace('"hi"', '"```"')
    assert extract_script(f"````python\n{inner}````") == inner


def test_extract_keeps_an_unterminated_block() -> None:
    assert extract_script(f"```python\n{SCRIPT}") == SCRIPT


def test_extract_without_orchestrate_returns_the_longest_python_block() -> None:
    assert extract_script("```python\nx = 1\n```\n```python\ny = [1, 2, 3]\n```") == \
        "y = [1, 2, 3]\n"


@pytest.mark.parametrize("answer", ["", "   \n", "<think>nothing</think>",
                                    "Sorry, I cannot write that script."])
def test_extract_empty_answers(answer: str) -> None:
    assert extract_script(answer) == ""


def test_extract_leaves_broken_code_for_the_checker() -> None:
    broken = "async def orchestrate(ctx, args):\n    return (\n"
    assert "async def orchestrate" in extract_script(f"```python\n{broken}```")


# ---- RecordedBackend ---------------------------------------------------------------------------

def _jsonl(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_recorded_backend_replays_in_order_by_purpose(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, {"purpose": "author", "output": "A1"},
                  {"purpose": "repair", "output": "R1"}, {"purpose": "repair", "output": "R2"})
    backend = backend_from_spec(f"recorded:{path}")
    assert isinstance(backend, RecordedBackend) and isinstance(backend, ModelBackend)
    assert backend.complete(MESSAGES, purpose="repair") == "R1"
    assert backend.complete(MESSAGES, purpose="author") == "A1"
    assert backend.complete(MESSAGES, purpose="repair") == "R2"
    assert [c.line for c in backend.calls] == [2, 1, 3]
    with pytest.raises(ReviseError, match="no unused 'repair' entry"):
        backend.complete(MESSAGES, purpose="repair")


def test_recorded_backend_key_must_occur_in_the_prompt(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, {"purpose": "repair", "key": "run-b", "output": "for b"},
                  {"purpose": "repair", "key": "run-a", "output": "for a"})
    backend = RecordedBackend.load(path)
    assert backend.complete([{"role": "user", "content": "# Repair run run-a"}],
                            purpose="repair") == "for a"
    assert backend.remaining("repair") == 1


@pytest.mark.parametrize(("line", "match"), [
    ("not json", "line 1 is not JSON"),
    ('{"purpose": "repair"}', "string \"output\""),
    ('{"purpose": "fix", "output": "x"}', "purpose 'fix'"),
    ('{"output": "x", "temperature": 0}', "unknown field"),
])
def test_recorded_file_errors_name_the_line(line: str, match: str) -> None:
    with pytest.raises(InputError, match=match):
        parse_jsonl(line, "x.jsonl")


def test_recorded_missing_file_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read recorded model outputs"):
        backend_from_spec(f"recorded:{tmp_path / 'missing.jsonl'}")


# ---- backend_from_spec / settings ----------------------------------------------------------------

def test_http_backend_needs_a_base_url() -> None:
    with pytest.raises(ConfigError, match="REVISE_MODEL_BASE_URL"):
        backend_from_spec("gpt-test", Settings(model_base_url=None))


def test_a_model_base_url_holding_its_endpoint_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"ends with the endpoint /chat/completions"):
        backend_from_spec("m", Settings(
            model_base_url="http://127.0.0.1:4000/v1/chat/completions"))


def test_http_backend_from_settings() -> None:
    backend = backend_from_spec("gpt-test", Settings(model_base_url="http://127.0.0.1:9/v1/",
                                                     model_api_key="sk-x"))
    assert isinstance(backend, OpenAIChatBackend)
    assert (backend.base_url, backend.model) == ("http://127.0.0.1:9/v1", "gpt-test")


def test_the_model_key_goes_in_the_header_the_endpoint_reads() -> None:
    """And REVISE_MODEL_HEADERS (a gateway's own) go with it."""
    with ModelServer([SCRIPT], key_header="api-key") as server:
        backend = backend_from_spec("fake-coder", Settings(
            model_base_url=server.base_url, model_api_key=FAKE_API_KEY,
            model_api_key_header="api-key", model_headers='{"X-Gateway": "gw-1"}'))
        assert backend.complete(MESSAGES, purpose="repair") == SCRIPT
        (request,) = server.chat_requests()
        assert request.headers["api-key"] == FAKE_API_KEY
        assert request.headers["x-gateway"] == "gw-1"
        assert "authorization" not in request.headers


# ---- OpenAIChatBackend over real HTTP ------------------------------------------------------------

def _backend(server: ModelServer, sleeps: list[float], **kwargs) -> OpenAIChatBackend:
    return OpenAIChatBackend(base_url=server.base_url, model=kwargs.pop("model", "fake-coder"),
                             api_key=kwargs.pop("api_key", FAKE_API_KEY), sleep=sleeps.append,
                             **kwargs)


def test_chat_completion_round_trip() -> None:
    with ModelServer([f"```python\n{SCRIPT}```"]) as server:
        answer = _backend(server, []).complete(MESSAGES, purpose="repair")
        request = server.chat_requests()[0]
    assert extract_script(answer) == SCRIPT
    assert request.headers["authorization"] == f"Bearer {FAKE_API_KEY}"
    assert request.body["model"] == "fake-coder"
    assert request.body["messages"] == MESSAGES
    assert request.body["temperature"] == 0.0


def test_401_is_a_config_error_that_never_shows_the_key() -> None:
    wrong = "sk-wrong-abcdef123456"
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(401, f"Incorrect API key provided: {wrong}"))
        with pytest.raises(ConfigError) as caught:
            _backend(server, [], api_key=wrong).complete(MESSAGES, purpose="repair")
        assert len(server.chat_requests()) == 1  # not retried
    assert "REVISE_MODEL_API_KEY" in caught.value.message
    assert wrong not in caught.value.message and wrong not in str(caught.value.to_json())


def test_403_is_a_config_error() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(403, "model not allowed for this key"))
        with pytest.raises(ConfigError, match="refused the credentials"):
            _backend(server, []).complete(MESSAGES, purpose="repair")


def test_429_is_retried_with_backoff_then_succeeds() -> None:
    sleeps: list[float] = []
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(429), error(429))
        answer = _backend(server, sleeps, backoff=0.5).complete(MESSAGES, purpose="repair")
        assert len(server.chat_requests()) == 3
    assert answer == SCRIPT
    assert sleeps == [0.5, 1.0]


def test_retry_after_header_is_honoured() -> None:
    sleeps: list[float] = []
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(429, headers={"Retry-After": "7"}),
                     error(429, headers={"Retry-After": "7", "retry-after-ms": "350"}))
        _backend(server, sleeps).complete(MESSAGES, purpose="repair")
    assert sleeps == [7.0, 0.35]  # OpenAI's milliseconds first


def test_a_retry_after_date_is_honoured_and_junk_falls_back_to_the_backoff() -> None:
    """An HTTP date (RFC 9110 allows it) used to be ignored; "nan" reached time.sleep,
    which raises: a repair ended in a traceback on a proxy's odd header."""
    sleeps: list[float] = []
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(429, headers={"Retry-After": when}),
                     error(503, headers={"Retry-After": "nan"}),
                     error(429, headers={"Retry-After": "-3"}))
        _backend(server, sleeps).complete(MESSAGES, purpose="repair")
    assert 18 <= sleeps[0] <= 20
    assert sleeps[1:] == [2.0, 4.0]  # the backoff of retries 2 and 3


def test_a_429_out_of_quota_is_a_config_error_at_once() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, out_of_quota())
        sleeps: list[float] = []
        with pytest.raises(ConfigError, match=r"out of quota .* billing") as caught:
            _backend(server, sleeps).complete(MESSAGES, purpose="repair")
        assert caught.value.setting == "REVISE_MODEL_API_KEY"
        assert len(server.chat_requests()) == 1 and sleeps == []


def test_429_after_retries_is_a_clear_error() -> None:
    sleeps: list[float] = []
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, *[error(429, "slow down")] * 4)
        with pytest.raises(ReviseError, match=r"rate limited .* after 4 attempts") as caught:
            _backend(server, sleeps, max_retries=3).complete(MESSAGES, purpose="repair")
        assert len(server.chat_requests()) == 4
    assert caught.value.fields["status"] == 429
    assert len(sleeps) == 3


@pytest.mark.parametrize("status", [500, 502, 503])
def test_5xx_is_retried(status: int) -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(status))
        assert _backend(server, []).complete(MESSAGES, purpose="repair") == SCRIPT
        assert len(server.chat_requests()) == 2


def test_5xx_after_retries_names_the_endpoint() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, *[error(503, "upstream down")] * 3)
        with pytest.raises(ReviseError, match=r"kept failing after 3 attempts.*503"):
            _backend(server, [], max_retries=2).complete(MESSAGES, purpose="repair")


def test_a_compressed_answer_is_read_and_a_broken_one_retried() -> None:
    """A proxy's gzip that does not inflate used to escape as httpx's DecodingError, a
    traceback out of `revise repair`; it is now a malformed answer, retried, then named."""
    with ModelServer([SCRIPT]) as server:
        answer = ok_chat(f"```python\n{SCRIPT}```")
        server.queue(CHAT, encoded("gzip", gzip.compress, answer))
        assert _backend(server, []).complete(MESSAGES, purpose="repair") == \
            f"```python\n{SCRIPT}```"
        assert server.chat_requests()[0].headers["accept-encoding"] == "gzip, deflate"
        broken = encoded("gzip", lambda raw: b"\x1f\x8b not gzip", ok_chat())
        server.queue(CHAT, broken, broken)
        with pytest.raises(ReviseError, match=r"gzip stream is broken.* after 2 attempts"):
            _backend(server, [], max_retries=1).complete(MESSAGES, purpose="repair")


def test_a_reasoning_model_is_asked_without_what_it_refuses() -> None:
    """OpenAI's reasoning models refuse temperature 0 and max_tokens with a 400; the client
    sent both, so `revise repair` could not use gpt-5 at all (a 400 read as 'the prompt may
    be too long'). A known one is asked without them; another that refuses one in its 400
    is asked again without it, once, and from then on."""
    with ModelServer([SCRIPT, SCRIPT, SCRIPT]) as server:
        gpt5 = _backend(server, [], model="gpt-5", max_tokens=900)
        assert gpt5.complete(MESSAGES, purpose="repair") == SCRIPT
        assert "temperature" not in server.bodies()[-1]
        assert server.bodies()[-1]["max_completion_tokens"] == 900
        other = _backend(server, [], model="house-reasoner", max_tokens=900)
        server.queue(CHAT, error(400, "Unsupported value: 'temperature'", param="temperature"))
        assert other.complete(MESSAGES, purpose="repair") == SCRIPT
        assert other.complete(MESSAGES, purpose="repair") == SCRIPT
        sent = server.bodies()[-3:]
        assert [("temperature" in b, "max_tokens" in b) for b in sent] == [
            (True, True), (False, True), (False, True)]


def test_timeout_is_retried() -> None:
    with ModelServer([SCRIPT, SCRIPT]) as server:
        server.queue(CHAT, slow(2.0))
        backend = _backend(server, [], timeout=0.3)
        assert backend.complete(MESSAGES, purpose="repair") == SCRIPT
        assert len(server.chat_requests()) == 2


def test_unreachable_endpoint_after_retries() -> None:
    backend = OpenAIChatBackend(base_url="http://127.0.0.1:9/v1", model="m", max_retries=1,
                                sleep=lambda s: None)
    with pytest.raises(ReviseError, match=r"could not connect .* after 2 attempts"):
        backend.complete(MESSAGES, purpose="repair")


def test_unknown_model_is_a_config_error() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, error(404, "The model does not exist"))
        with pytest.raises(ConfigError, match="does not serve model 'fake-coder'"):
            _backend(server, []).complete(MESSAGES, purpose="author")


def test_no_api_key_sends_no_authorization_header() -> None:
    with ModelServer([SCRIPT], api_key=None) as server:
        _backend(server, [], api_key=None).complete(MESSAGES, purpose="repair")
        assert "authorization" not in server.chat_requests()[0].headers


# ---- bounded waiting, malformed answers, progress ----------------------------------------------

def test_timeout_retries_and_backoff_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"TIMEOUT_SECONDS": "7.5", "RETRIES": "1", "BACKOFF_SECONDS": "0.25",
                        "MAX_BACKOFF_SECONDS": "2", "DEADLINE_SECONDS": "40"}.items():
        monkeypatch.setenv(f"REVISE_MODEL_{name}", value)
    backend = backend_from_spec("m", Settings(model_base_url="http://127.0.0.1:9/v1"))
    assert isinstance(backend, OpenAIChatBackend)
    assert (backend.timeout, backend.max_retries, backend.backoff, backend.max_backoff,
            backend.deadline) == (7.5, 1, 0.25, 2.0, 40.0)


def test_a_hung_endpoint_is_bounded_by_the_timeout_setting() -> None:
    settings = Settings(model_timeout_seconds=0.4, model_retries=1, model_backoff_seconds=0)
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, slow(30), slow(30))
        backend = OpenAIChatBackend.from_settings(
            settings.model_copy(update={"model_base_url": server.base_url,
                                        "model_api_key": FAKE_API_KEY}), model="m")
        started = time.monotonic()
        with pytest.raises(ModelEndpointError) as caught:
            backend.complete(MESSAGES, purpose="repair")
        elapsed = time.monotonic() - started
        assert len(server.chat_requests()) == 2
    assert elapsed < 3.0
    assert "no answer within 0.4 s after 2 attempts" in caught.value.message
    assert "REVISE_MODEL_TIMEOUT_SECONDS" in caught.value.message
    assert caught.value.fields["reason"] == "timeout"


def test_the_deadline_caps_retries() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, *[slow(30)] * 6)
        backend = _backend(server, [], timeout=0.3, max_retries=5, deadline=0.8, backoff=0)
        started = time.monotonic()
        with pytest.raises(ModelEndpointError, match=r"REVISE_MODEL_DEADLINE_SECONDS=0\.8"):
            backend.complete(MESSAGES, purpose="repair")
        assert time.monotonic() - started < 2.0
        assert len(server.chat_requests()) < 6


def test_a_trickling_answer_cannot_outlast_the_timeout() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, trickle(0.2, "x" * 400))
        backend = _backend(server, [], timeout=0.5, max_retries=0)
        started = time.monotonic()
        with pytest.raises(ModelEndpointError, match=r"no answer within 0\.5 s"):
            backend.complete(MESSAGES, purpose="repair")
        assert time.monotonic() - started < 1.5


def test_a_truncated_answer_is_retried_and_called_malformed() -> None:
    sleeps: list[float] = []
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, truncated_chat())
        assert _backend(server, sleeps).complete(MESSAGES, purpose="repair") == SCRIPT
        assert len(server.chat_requests()) == 2
    with ModelServer([]) as server:
        server.queue(CHAT, *[truncated_chat()] * 3)
        with pytest.raises(ModelEndpointError) as caught:
            _backend(server, [], max_retries=2).complete(MESSAGES, purpose="repair")
    message = caught.value.message
    assert "malformed answer" in message and "after 3 attempts" in message
    assert "BASE_URL" not in message and caught.value.fields["reason"] == "malformed"


def test_an_answer_without_choices_is_malformed_and_retried() -> None:
    def no_choices(request, server):
        reply = ok_chat("x")(request, server)
        reply.body = {"id": "chatcmpl-x", "object": "chat.completion"}
        return reply

    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, no_choices)
        assert _backend(server, []).complete(MESSAGES, purpose="repair") == SCRIPT


def test_a_web_page_is_a_base_url_config_error() -> None:
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, html_page())
        with pytest.raises(ConfigError, match=r"web page .* REVISE_MODEL_BASE_URL"):
            _backend(server, []).complete(MESSAGES, purpose="repair")
        assert len(server.chat_requests()) == 1


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_base_url_config_error_never_followed(status: int) -> None:
    """An http:// base URL whose host sends it to https:// (the usual redirect) is not
    asked again, there or here: the error names the base URL to set."""
    with ModelServer([SCRIPT]) as server:
        server.queue(CHAT, redirect(status, "https://models.example.test/v1/chat/completions"))
        with pytest.raises(ConfigError) as caught:
            _backend(server, []).complete(MESSAGES, purpose="repair")
        assert f"HTTP {status}" in caught.value.message
        assert "set REVISE_MODEL_BASE_URL to https://models.example.test/v1" in \
            caught.value.message
        assert caught.value.setting == "REVISE_MODEL_BASE_URL"
        assert len(server.chat_requests()) == 1


def test_waiting_shows_a_progress_line_on_a_terminal_only() -> None:
    with ModelServer([SCRIPT, SCRIPT]) as server:
        server.queue(CHAT, error(503), slow(1.2))
        terminal = io.StringIO()
        backend = Waiting(_backend(server, [], backoff=0), Console(
            file=terminal, force_terminal=True, width=200), rounds=5, interval=0.1)
        assert backend.complete(MESSAGES, purpose="repair") == SCRIPT
        shown = terminal.getvalue()
        piped = io.StringIO()
        quiet = Waiting(_backend(server, []), Console(file=piped, force_terminal=False),
                        rounds=5)
        assert quiet.complete(MESSAGES, purpose="repair") == SCRIPT
    assert "waiting for fake-coder (repair, round 1 of 5)" in shown
    assert "HTTP 503" in shown and "retry 1/3" in shown
    assert piped.getvalue() == ""
    assert quiet.name == "fake-coder"

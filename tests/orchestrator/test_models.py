"""Model backends: script extraction, the JSONL replayer, the OpenAI-compatible adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from broker.errors import ConfigError, InputError, ReviseError
from broker.settings import Settings
from orchestrator.models import (
    ModelBackend,
    OpenAIChatBackend,
    RecordedBackend,
    backend_from_spec,
    extract_script,
    parse_jsonl,
)
from tests.fakes.model_server import FAKE_API_KEY, ModelServer
from tests.fakes.openai_server import CHAT, error, slow

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


def test_http_backend_from_settings() -> None:
    backend = backend_from_spec("gpt-test", Settings(model_base_url="http://127.0.0.1:9/v1/",
                                                     model_api_key="sk-x"))
    assert isinstance(backend, OpenAIChatBackend)
    assert (backend.base_url, backend.model) == ("http://127.0.0.1:9/v1", "gpt-test")


# ---- OpenAIChatBackend over real HTTP ------------------------------------------------------------

def _backend(server: ModelServer, sleeps: list[float], **kwargs) -> OpenAIChatBackend:
    return OpenAIChatBackend(base_url=server.base_url, model="fake-coder",
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
        server.queue(CHAT, error(429, headers={"Retry-After": "7"}))
        _backend(server, sleeps).complete(MESSAGES, purpose="repair")
    assert sleeps == [7.0]


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

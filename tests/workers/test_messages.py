"""The queue message models, without any service: what each task accepts and refuses."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import InputError, error_from_json
from workers.messages import (
    DispatchJob,
    ExecuteCalls,
    InvalidMessage,
    SandboxJob,
    name_in,
    parse_message,
    require_utf8,
)

ENVELOPE = Envelope().model_dump(mode="json")
SCRIPT = "async def orchestrate(ctx, args):\n    return 1\n"


def _job(**changes: Any) -> dict[str, Any]:
    return {"job_id": "0f" * 16, "run_id": "run-1", "script": SCRIPT, "args": {"a": [1, 2.5]},
            "envelope": ENVELOPE} | changes


def _refusal(model: type, data: Any, what: str = "dispatch job") -> str:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(model, data, what)
    assert caught.value.to_json()["type"] == "InvalidMessage"
    return caught.value.message


def test_a_valid_dispatch_job_parses() -> None:
    job = parse_message(DispatchJob, _job(), "dispatch job")
    assert job.run_id == "run-1" and job.envelope == Envelope()
    assert parse_message(DispatchJob, _job(args=None, job_id=None), "dispatch job").args is None


@pytest.mark.parametrize(("change", "expected"), [
    ({"script": "x = '\ud800'"}, "script: the script is not valid UTF-8 text: it has a lone "
                                  "surrogate '\\ud800' at character 5"),
    ({"run_id": "../../x"}, "run_id: run id '../../x' is not allowed: it contains a path "
                            "separator"),
    ({"run_id": 7}, "run_id: Input should be a valid string"),
    ({"job_id": "a/b"}, "job_id: job id 'a/b' is not allowed"),
    ({"envelope": ENVELOPE | {"evil": True}}, "envelope.evil: Extra inputs are not permitted"),
    ({"envelope": {"grants": ["image.generat"]}}, "envelope.grants: unknown capability "
                                                  "'image.generat'"),
    ({"args": {"k": "\udc80"}}, "args: a string in the args is not valid UTF-8 text"),
    ({"args": {1, 2}}, "args: input was not a valid JSON value"),
    ({"sneaky": 1}, "sneaky: Extra inputs are not permitted"),
])
def test_bad_dispatch_jobs_name_the_field_and_the_problem(change: dict, expected: str) -> None:
    message = _refusal(DispatchJob, _job(**change))
    assert message.startswith("invalid dispatch job, refused before anything ran: ")
    assert expected in message


def test_missing_fields_and_non_dict_jobs() -> None:
    job = _job()
    del job["envelope"]
    assert _refusal(DispatchJob, job).endswith("envelope: Field required")
    for not_a_job in (None, 42, "job", ["run-1"]):
        assert "dispatch job: Input should be a valid dictionary" in _refusal(DispatchJob,
                                                                             not_a_job)


def test_every_problem_is_listed_and_no_input_is_echoed() -> None:
    message = _refusal(DispatchJob, {"run_id": "../x", "script": "s3cr3t\ud800"})
    for field in ("run_id", "script", "args", "envelope"):
        assert f"{field}: " in message
    assert "s3cr3t" not in message  # pydantic's input_value is left out


def test_the_error_crosses_processes_as_itself() -> None:
    with pytest.raises(InvalidMessage) as caught:
        parse_message(DispatchJob, 42, "dispatch job")
    again = error_from_json(caught.value.to_json())
    assert type(again) is InvalidMessage and again.message == caught.value.message
    assert isinstance(again, InputError)  # the CLI maps it to exit 2
    assert pickle.loads(pickle.dumps(caught.value)).message == caught.value.message


def test_sandbox_job() -> None:
    job = {"job_id": "j1", "run_id": "r1", "revision": 2, "source": SCRIPT,
           "admission": {"text": SCRIPT, "sites": []}, "args_text": "{}",
           "envelope": ENVELOPE}
    assert parse_message(SandboxJob, job, "sandbox job").revision == 2
    assert "revision: Input should be a valid integer" in _refusal(
        SandboxJob, job | {"revision": "2"}, "sandbox job")
    assert "revision: Input should be greater than or equal to 1" in _refusal(
        SandboxJob, job | {"revision": 0}, "sandbox job")
    assert "args_text: the args text is not valid UTF-8" in _refusal(
        SandboxJob, job | {"args_text": "\ud800"}, "sandbox job")
    assert "job_id: job id '../j' is not allowed" in _refusal(
        SandboxJob, job | {"job_id": "../j"}, "sandbox job")


def test_execute_calls() -> None:
    calls = {"run_id": "r1", "revision": 1, "attempts": [4, 7],
             "doorbell": "revise:t1-doorbell:0123456789abcdef"}
    parsed = parse_message(ExecuteCalls, calls, "capability call")
    assert (parsed.run_id, parsed.revision, parsed.attempts) == ("r1", 1, [4, 7])
    assert parse_message(ExecuteCalls, calls | {"doorbell": None}, "c").doorbell is None
    message = _refusal(ExecuteCalls, calls | {"run_id": "../x", "attempts": [0, "2"],
                                              "doorbell": "x"}, "capability call")
    assert "run_id: run id '../x' is not allowed" in message
    assert "attempts.0: Input should be greater than or equal to 1" in message
    assert "attempts.1: Input should be a valid integer" in message
    assert "doorbell: not a doorbell channel of this deployment" in message
    assert "an attempt appears twice" in _refusal(ExecuteCalls, calls | {"attempts": [3, 3]},
                                                  "c")
    assert "at most 64 items" in _refusal(ExecuteCalls, calls | {"attempts": list(
        range(1, 66))}, "c")
    assert "payload: Extra inputs are not permitted" in _refusal(
        ExecuteCalls, calls | {"payload": {"prompt": "forged"}}, "c")


def test_require_utf8_and_name_in() -> None:
    assert require_utf8("script", "ok") == "ok"
    with pytest.raises(InputError, match="lone surrogate '\\\\udfff' at character 1"):
        require_utf8("script", "a\udfff")
    assert name_in({"run_id": "r1"}, "run_id", "run id") == "r1"
    assert name_in({"run_id": "../x"}, "run_id", "run id") is None
    assert name_in(42, "run_id", "run id") is None


def test_a_message_with_many_problems_gets_a_bounded_description() -> None:
    message = _refusal(DispatchJob, _job(args=[{1, 2}] * 1000))
    assert message.endswith("(and 992 more)") and len(message) < 1000

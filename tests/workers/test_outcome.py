"""Task outcomes: the exception a job or call task raises survives Celery's JSON result
backend and pickling with its type, message, identity and answer (no server needed)."""

from __future__ import annotations

import pickle

from celery import Celery

from workers.outcome import (
    CallFailed,
    RunFailed,
    RunStopped,
    answer_of,
    run_outcome,
    wave_outcome,
)

ANSWER = {"run_id": "r1", "revision": 2, "status": "stopped",
          "error": {"type": "ReplayDivergence", "message": "payload changed",
                    "identity": "orchestrate/#0@:0"}}


def test_a_stopped_run_raises_run_stopped_with_every_field() -> None:
    exc = run_outcome(ANSWER)
    assert isinstance(exc, RunStopped)
    assert (exc.error_type, exc.identity, exc.run_id, exc.revision) == (
        "ReplayDivergence", "orchestrate/#0@:0", "r1", 2)
    assert str(exc) == ("ReplayDivergence at orchestrate/#0@:0: payload changed "
                        "(run r1 revision 2)")
    assert repr(exc).startswith("RunStopped('ReplayDivergence at orchestrate/#0@:0")
    assert isinstance(run_outcome(ANSWER | {"status": "failed"}), RunFailed)
    assert run_outcome(ANSWER | {"status": "succeeded", "error": None}) is None


def test_the_json_result_backend_and_pickle_keep_the_answer() -> None:
    backend = Celery("t", backend="cache+memory://", set_as_current=False).backend
    exc = run_outcome(ANSWER)
    assert exc is not None
    rebuilt = backend.exception_to_python(backend.prepare_exception(exc, "json"))
    assert type(rebuilt) is RunStopped
    assert answer_of(rebuilt) == ANSWER and rebuilt.identity == "orchestrate/#0@:0"
    unpickled = pickle.loads(pickle.dumps(exc))
    assert type(unpickled) is RunStopped and answer_of(unpickled) == ANSWER


def test_waves_with_a_call_without_a_committed_result_are_failures() -> None:
    ok = {"identity": "orchestrate/#1@:0", "outcome": "executed"}
    for outcome in ("failed", "denied", "diverged", "stopped"):
        report = {"identity": "orchestrate/#0@:0", "outcome": outcome,
                  "error": {"type": "CapabilityError", "message": "unsupported size"}}
        answer = {"reports": [ok, report, report | {"identity": "orchestrate/#2@:0"}]}
        exc = wave_outcome(answer, "r1")
        assert isinstance(exc, CallFailed) and answer_of(exc) == answer
        assert "CapabilityError at orchestrate/#0@:0" in str(exc)
        assert "(and 1 more of its wave)" in str(exc) and exc.run_id == "r1"
        assert "1 of the wave's 3 calls got a result" in str(exc)
    single = wave_outcome({"reports": [report]}, "r1")
    assert single is not None and "got a result" not in str(single)
    for outcome in ("executed", "replayed"):
        assert wave_outcome({"reports": [{"outcome": outcome}, ok]}, "r1") is None
    assert answer_of(ValueError("x")) is None

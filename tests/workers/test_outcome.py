"""Task outcomes: the exception a job or call task raises survives Celery's JSON result
backend and pickling with its type, message, identity and answer (no server needed)."""

from __future__ import annotations

import pickle

from celery import Celery

from broker.calls import CallReport, Outcome
from broker.identity import Identity
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
    def call(n: int, outcome: Outcome) -> CallReport:
        error = None if outcome in (Outcome.EXECUTED, Outcome.REPLAYED) else {
            "type": "CapabilityError", "message": "unsupported size"}
        return CallReport(Identity("orchestrate/#" + str(n), (), 0), "image.generate",
                          outcome, error=error)

    for outcome in (Outcome.FAILED, Outcome.DENIED, Outcome.DIVERGED, Outcome.STOPPED):
        exc = wave_outcome([call(1, Outcome.EXECUTED), call(0, outcome), call(2, outcome)],
                           "r1", 2)
        assert isinstance(exc, CallFailed)
        assert "CapabilityError at orchestrate/#0@:0" in str(exc)
        assert "(and 1 more of its wave)" in str(exc) and exc.run_id == "r1"
        assert "1 of the task's 3 calls got a result" in str(exc)
    single = wave_outcome([call(0, Outcome.FAILED)], "r1", 2)
    assert single is not None and "got a result" not in str(single)
    for outcome in (Outcome.EXECUTED, Outcome.REPLAYED):
        assert wave_outcome([call(0, outcome), call(1, Outcome.EXECUTED)], "r1", 2) is None
    assert answer_of(ValueError("x")) is None

"""Every Revise error class: a stable code, typed fields checked when it is made, and a trip
through each way an error travels (pickle, Celery's JSON result backend, ``to_json`` and
``error_from_json``) that gives back the same class with the same fields."""

from __future__ import annotations

import ast
import json
import pickle
import re
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.backends.base import Backend

import broker.artifacts
import broker.settings
import orchestrator.models.base
import orchestrator.models.recorded
import workers.messages
import workers.outcome
from broker import error_fields
from broker.errors import (
    CapabilityError,
    CheckFailed,
    ReplayDivergence,
    ReviseError,
    SlotConflict,
    error_class,
    error_from_json,
)
from broker.identity import Identity

ROOT = Path(__file__).resolve().parents[2]
DEFINED_IN = (broker.artifacts, broker.settings, orchestrator.models.base,
              orchestrator.models.recorded, workers.messages, workers.outcome)

# Codes are stored in run records and read by programs: a change here is a breaking change.
CODES = {
    "ConfigError": "config_error", "InputError": "input_error",
    "AdmissionError": "admission_error", "CheckFailed": "check_failed",
    "AnnotationError": "annotation_error", "GateRejected": "gate_rejected",
    "CallsDropped": "calls_dropped", "NoScript": "no_script", "AnswerCutOff": "answer_cut_off",
    "PrefixConflict": "prefix_conflict", "SafetyStop": "safety_stop",
    "ReplayDivergence": "replay_divergence", "AttemptUnresolved": "attempt_unresolved",
    "AttemptInFlight": "attempt_in_flight", "RevisionNotRunning": "revision_not_running",
    "SemanticRepeatDenied": "semantic_repeat_denied", "TakeNotApproved": "take_not_approved",
    "CapabilityDenied": "capability_denied", "BudgetExceeded": "budget_exceeded",
    "OrphanStop": "orphans_stop", "SandboxProtocolError": "sandbox_protocol_error",
    "StoreUnavailable": "store_unavailable",
    "QueueUnavailable": "queue_unavailable", "Parked": "parked",
    "BrokerError": "broker_error", "CapabilityError": "capability_error",
    "StoreError": "store_error", "SlotConflict": "slot_conflict",
    "RunNotFound": "run_not_found", "SchemaNotReady": "schema_not_ready",
    "RunBusy": "run_busy", "SandboxError": "sandbox_error",
    "SandboxTimeout": "sandbox_timeout", "SandboxUnavailable": "sandbox_unavailable",
    "RevisionLost": "revision_lost", "ScriptError": "script_error",
    "QueueError": "queue_error", "DispatchFailed": "dispatch_failed",
    "JobInFlight": "job_in_flight", "ArtifactNotFound": "artifact_not_found",
    "ArtifactCorrupt": "artifact_corrupt", "ArtifactTooLarge": "artifact_too_large",
    "SettingsError": "settings_error", "ModelEndpointError": "model_endpoint",
    "RecordingExhausted": "recording_exhausted", "InvalidMessage": "invalid_message",
    "TaskOutcome": "task_outcome", "RunFailed": "run_failed", "RunStopped": "run_stopped",
    "CallFailed": "call_failed",
}

# A value of each declared field type (the annotation as written, without "| None").
SAMPLES: dict[str, Any] = {
    "str": "a value", "int": 7, "bool": True, "IdentityText": "orchestrate/#1@0.2:3",
    "list[str]": ["R03", "R07"], "list[int]": [4, 9],
    "dict[str, JsonValue]": {"status": "stopped", "calls": [1, "two", None, {"x": 1.5}]},
    "list[dict[str, JsonValue]]": [{"kind": "removed", "site": "orchestrate/#0",
                                    "line": None, "candidates": ["a", "b"]}],
}


def product_classes() -> list[type[ReviseError]]:
    return [cls for cls in (ReviseError, *ReviseError._registry.values())
            if cls.__module__.split(".")[0] in {"broker", "orchestrator", "workers"}]


def sample_fields(cls: type[ReviseError]) -> dict[str, Any]:
    return {f.name: SAMPLES[f.hint.removesuffix(" | None")]
            for f in error_fields.fields_of(cls)}


def test_every_code_is_the_stable_one_and_no_two_classes_share_one() -> None:
    codes = {cls.__name__: cls.code for cls in product_classes() if cls is not ReviseError}
    assert codes == CODES
    assert len(set(codes.values())) == len(codes)


def test_every_error_class_in_the_product_is_known_to_this_test() -> None:
    """A class defined in a module ``DEFINED_IN`` misses would be left out of the trips."""
    names = set(CODES) | {"ReviseError"}
    for path in [*ROOT.glob("broker/**/*.py"), *ROOT.glob("orchestrator/**/*.py"),
                 *ROOT.glob("workers/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Name) and b.id in names for b in node.bases):
                assert node.name in CODES, f"{path}: {node.name} is not in CODES"
                assert error_class(node.name) is not None, f"import the module of {path}"


@pytest.mark.parametrize("cls", product_classes(), ids=lambda c: c.__name__)
def test_pickling_keeps_class_message_and_fields(cls: type[ReviseError]) -> None:
    error = cls("what went wrong, and the fix", **sample_fields(cls))
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and again.message == error.message
    assert again.fields == error.fields == sample_fields(cls)


@pytest.mark.parametrize("cls", product_classes(), ids=lambda c: c.__name__)
def test_celerys_json_result_backend_rebuilds_it_whole(cls: type[ReviseError]) -> None:
    backend = Backend(app=Celery(set_as_current=False), serializer="json")
    error = cls("what went wrong", **sample_fields(cls))
    stored = json.loads(json.dumps(backend.prepare_exception(error)))
    again = backend.exception_to_python(stored)
    assert type(again) is cls
    assert (again.message, again.fields) == (error.message, error.fields)


@pytest.mark.parametrize("cls", product_classes(), ids=lambda c: c.__name__)
def test_json_gives_back_the_same_class_with_the_same_typed_fields(cls: type[ReviseError]
                                                                   ) -> None:
    error = cls("what went wrong", **sample_fields(cls))
    data = json.loads(json.dumps(error.to_json()))
    assert {k: data[k] for k in ("type", "code", "message")} == {
        "type": cls.__name__, "code": cls.code, "message": "what went wrong"}
    assert data["identity"] == error.fields.get("identity")
    again = error_from_json(data)
    assert type(again) is cls and again.fields == error.fields
    assert again.to_json() == error.to_json()


def test_the_fields_are_attributes_and_the_text_is_the_message() -> None:
    stop = ReplayDivergence("it changed", identity="s@:0", committed_digest="a", digest="b",
                            line=3)
    assert (stop.identity, stop.committed_digest, stop.digest, stop.line) == (
        "s@:0", "a", "b", 3)
    # By position too, in ``args`` order: how Celery's JSON backend rebuilds an exception.
    assert ReplayDivergence(*stop.args).fields == stop.fields
    assert str(stop) == "it changed" and stop.code == "replay_divergence"
    assert ReplayDivergence("x").line is None  # not given: its default


def test_an_identity_given_as_the_value_type_is_stored_as_its_text() -> None:
    conflict = SlotConflict("taken", identity=Identity("orchestrate/#0", (1, 2), 0))
    assert conflict.identity == "orchestrate/#0@1.2:0"
    assert conflict.to_json()["identity"] == "orchestrate/#0@1.2:0"


@pytest.mark.parametrize(("make", "problem"), [
    (lambda: ReplayDivergence("x", idnetity="s@:0"), "has no field 'idnetity'"),
    (lambda: ReplayDivergence("x", line="3"), "field 'line' must be int | None"),
    (lambda: ReplayDivergence("x", line=True), "field 'line' must be int | None"),
    (lambda: ReplayDivergence("x", identity=7), "field 'identity' must be"),
    (lambda: CheckFailed("x", rules=["R01"]), "needs its field 'lines'"),
    (lambda: CheckFailed("x", rules=("R01",), lines=[1]), "field 'rules' must be list[str]"),
    (lambda: CapabilityError("x", capability="a", status=None, provider_code="c",
                             retryable="yes"), "field 'retryable' must be bool"),
    (lambda: ReplayDivergence("x", "s@:0", "a", "b", 1, "more"), "at most 4 field values"),
    (lambda: ReplayDivergence(3), "takes a message (str) first"),
    (lambda: workers.outcome.RunFailed("x", "T", "s@:0", "r", 1, {"a": {1, 2}}),
     "field 'answer'['a'] must be"),
], ids=["unknown", "str for int", "bool for int", "int for identity", "missing",
        "tuple for list", "str for bool", "too many positional", "no message", "not JSON"])
def test_an_unknown_missing_or_mistyped_field_is_a_type_error(make: Any, problem: str
                                                                ) -> None:
    with pytest.raises(TypeError, match=re.escape(problem)):
        make()


def test_a_class_must_declare_a_code_of_its_own_that_no_other_class_has() -> None:
    with pytest.raises(TypeError, match="declares no code"):
        type("NoCode", (ReviseError,), {})
    with pytest.raises(TypeError, match="taken"):
        type("Twin", (ReviseError,), {"code": "replay_divergence"})
    with pytest.raises(TypeError, match="taken"):
        type("ReplayDivergence", (ReviseError,), {"code": "a_new_code"})


def test_a_mutable_default_or_a_reserved_name_is_refused_when_first_used() -> None:
    shared = type("SharedDefault", (ReviseError,), {
        "__module__": __name__, "code": "test_shared_default",
        "__annotations__": {"lines": "list[int]"}, "lines": []})
    with pytest.raises(TypeError, match="mutable default"):
        shared("x")
    reserved = type("ReservedName", (ReviseError,), {
        "__module__": __name__, "code": "test_reserved_name",
        "__annotations__": {"fields": "str | None"}, "fields": None})
    with pytest.raises(TypeError, match="that name is taken"):
        reserved("x")


@pytest.mark.parametrize(("data", "problem"), [
    (["ReplayDivergence"], "a JSON object, not list"),
    ({"type": "NoSuchError", "message": "x"}, "unknown type 'NoSuchError'"),
    ({"type": "__class__", "message": "x"}, "unknown type"),
    ({"type": "ReplayDivergence", "code": "budget_exceeded", "message": "x"},
     "its code is 'replay_divergence'"),
    ({"type": "ReplayDivergence", "message": "x", "line": "7"}, "field 'line' must be"),
    ({"type": "ReplayDivergence", "message": "x", "exec": "os.system"}, "no field 'exec'"),
    ({"type": "CheckFailed", "message": "x", "rules": ["R01"]}, "needs its field 'lines'"),
], ids=["not an object", "unknown type", "dunder type", "another code", "mistyped",
        "unknown field", "missing field"])
def test_error_from_json_refuses_what_no_error_wrote(data: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        error_from_json(data)


def test_a_class_without_an_identity_field_reads_back_its_null_identity() -> None:
    """``to_json`` always has ``identity`` (the run report's contract)."""
    data = CheckFailed("refused", rules=["R03"], lines=[2]).to_json()
    assert data["identity"] is None and "identity" not in CheckFailed("x", rules=[],
                                                                      lines=[]).fields
    assert error_from_json(data).fields == {"rules": ["R03"], "lines": [2]}
    with pytest.raises(ValueError, match="no field 'identity'"):
        error_from_json({**data, "identity": "s@:0"})

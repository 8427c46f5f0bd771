import json

import pytest
from pydantic import ValidationError

from broker.catalog import PRODUCTION_CAPABILITIES
from broker.envelope import Budget, Envelope, HostMaxima, SandboxLimits, load_envelope
from broker.errors import InputError
from broker.settings import LedgerPolicy, OrphanPolicy


def test_defaults():
    env = Envelope()
    assert set(env.grants) == PRODUCTION_CAPABILITIES
    assert env.approvals_required == [] and env.approvals == []
    assert env.budget == Budget(max_calls=None, max_cost=None)
    assert env.concurrency == 4 and env.call_timeout_seconds is None
    assert env.ledger_policy is None and env.orphan_policy is None
    assert env.sandbox == SandboxLimits()
    assert env.sandbox.memory_mb == 512 and env.sandbox.output_bytes == 1_048_576
    assert env.dry_run is False


def test_frozen_and_extra_forbidden():
    env = Envelope()
    with pytest.raises(ValidationError):
        env.concurrency = 8
    with pytest.raises(ValidationError):
        Envelope(grant=["image.generate"])
    with pytest.raises(ValidationError):
        Envelope(concurrency=0)
    with pytest.raises(ValidationError):
        Envelope(concurrency=65)


def test_approval_helpers():
    env = Envelope(approvals_required=["image.generate"], approvals=[])
    assert env.needs_approval("image.generate") and not env.needs_approval("text.generate")
    assert not Envelope(approvals_required=["image.generate"],
                        approvals=["image.generate"]).needs_approval("image.generate")
    assert env.is_granted("text.generate") and not env.is_granted("video.generate")


def test_load_json(tmp_path):
    path = tmp_path / "env.json"
    path.write_text(json.dumps({"grants": ["image.generate", "video.generate"],
                                "budget": {"max_calls": 5, "max_cost": 0.5},
                                "ledger_policy": "deny", "orphan_policy": "stop",
                                "sandbox": {"memory_mb": 256}, "dry_run": True}))
    env = load_envelope(path)
    assert env.grants == ["image.generate", "video.generate"]
    assert env.budget.max_calls == 5 and env.budget.max_cost == 0.5
    assert env.ledger_policy is LedgerPolicy.DENY and env.orphan_policy is OrphanPolicy.STOP
    assert env.sandbox.memory_mb == 256 and env.sandbox.pids == 128
    assert env.dry_run


@pytest.mark.parametrize("name", ["env.yaml", "env.yml", "envelope"])
def test_load_yaml(tmp_path, name):
    path = tmp_path / name
    path.write_text("grants:\n  - text.generate\nconcurrency: 2\nbudget:\n  max_cost: 1.5\n")
    env = load_envelope(path)
    assert env.grants == ["text.generate"] and env.concurrency == 2
    assert env.budget.max_cost == 1.5


def test_load_json_without_extension(tmp_path):
    path = tmp_path / "envelope"
    path.write_text('{"concurrency": 3}')
    assert load_envelope(path).concurrency == 3


def test_unknown_grant_names_the_catalog(tmp_path):
    path = tmp_path / "env.yaml"
    path.write_text("grants: [image.generate, video.gen]\n")
    with pytest.raises(InputError) as caught:
        load_envelope(path)
    message = caught.value.message
    assert str(path) in message and "'grants'" in message and "video.gen" in message
    assert "catalog" in message and "image.generate" in message
    assert caught.value.field == "grants"


def test_unknown_field_names_file_field_and_fix(tmp_path):
    path = tmp_path / "env.json"
    path.write_text('{"budget": {"max_call": 3}}')
    with pytest.raises(InputError) as caught:
        load_envelope(path)
    message = caught.value.message
    assert str(path) in message and "budget.max_call" in message
    assert "remove it" in message and "max_calls" in message


def test_bad_value_names_the_field(tmp_path):
    path = tmp_path / "env.json"
    path.write_text('{"concurrency": 100, "sandbox": {"cpus": -1}}')
    with pytest.raises(InputError) as caught:
        load_envelope(path)
    assert "'concurrency'" in caught.value.message and "sandbox.cpus" in caught.value.message
    assert "Traceback" not in caught.value.message


@pytest.mark.parametrize(("name", "text", "expected"), [
    ("env.json", '{"grants": [', "not valid JSON"),
    ("env.yaml", "grants: [unclosed\n", "not valid YAML"),
    ("env.json", "", "is empty"),
    ("env.yaml", "- a\n- b\n", "top level"),
    ("env.json", '"just a string"', "top level"),
])
def test_syntax_and_shape_errors(tmp_path, name, text, expected):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError, match=expected) as caught:
        load_envelope(path)
    assert str(path) in caught.value.message


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_envelope(tmp_path / "nope.json")


@pytest.mark.parametrize(("field", "value"), [
    ("memory_mb", 1_000_000_000), ("pids", 100_000_000), ("tmpfs_mb", 100_000_000),
    ("timeout_seconds", 1e12), ("output_bytes", 2 ** 40), ("args_bytes", 2 ** 40)])
def test_sandbox_limits_past_what_a_host_can_start_are_refused_at_submit(tmp_path, field,
                                                                         value):
    path = tmp_path / "envelope.json"
    path.write_text(json.dumps({"sandbox": {field: value}}))
    with pytest.raises(InputError) as caught:
        load_envelope(path)
    assert f"field 'sandbox.{field}'" in caught.value.message
    assert "less than or equal to" in caught.value.message


def test_approved_takes_name_catalog_capabilities():
    assert Envelope(approved_takes=["image.generate"]).approved_takes == ["image.generate"]
    with pytest.raises(ValidationError):
        Envelope(approved_takes=["image.generat"])


@pytest.mark.parametrize(("limits", "field", "fix"), [
    ({"cpus": 3}, "sandbox.cpus", "3 CPUs is more than this host has (2); ask for at most 2"),
    ({"memory_mb": 4096}, "sandbox.memory_mb",
     "4096 MiB is more memory than this host has (2048 MiB); ask for less"),
])
def test_limits_past_this_host_are_refused_at_submit(tmp_path, limits, field, fix):
    """A Docker host refuses --cpus past its CPUs when the container is created: that
    failure is named at submit, in one line, before any revision exists."""
    path = tmp_path / "envelope.json"
    path.write_text(json.dumps({"sandbox": limits}))
    small = HostMaxima(cpus=2, memory_mb=2048)
    with pytest.raises(InputError) as caught:
        load_envelope(path, small)
    assert caught.value.message == f"envelope file {path}: field {field!r}: {fix}"
    assert caught.value.field == field
    path.write_text(json.dumps({"sandbox": {"cpus": 2, "memory_mb": 2048}}))
    assert load_envelope(path, small).sandbox.cpus == 2


def test_this_host_s_maxima_are_read_from_the_host():
    maxima = HostMaxima.of_this_host()
    assert maxima.cpus >= 1 and maxima.memory_mb >= 256


@pytest.mark.parametrize("name", ["deep.json", "deep.yaml", "deep"])
def test_a_deeply_nested_envelope_is_one_error_line(tmp_path, name):
    path = tmp_path / name
    path.write_text('{"sandbox": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(InputError, match="nests too deeply to read"):
        load_envelope(path)

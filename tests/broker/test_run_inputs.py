"""A revision stores the run's inputs by digest; blobs are content-addressed per run
(SQLite and PostgreSQL through the ``store`` fixture)."""

from __future__ import annotations

import json

import pytest

from broker.envelope import Budget, Envelope
from broker.errors import InputError, StoreError
from broker.identity import call_digest, sha256_hex
from orchestrator.inputs import (
    MISSING,
    args_bytes,
    envelope_bytes,
    payload_bytes,
    resolve_inputs,
)

RUN = "inputs-1"


def test_add_revision_stores_args_and_envelope_by_digest(store):
    store.ensure_run(RUN)
    args, env = args_bytes({"shots": ["a", "b"]}), envelope_bytes(Envelope())
    number = store.add_revision(RUN, "src", "h", args=args, envelope=env)
    store.finish_revision(RUN, number, "failed", {})
    bare = store.add_revision(RUN, "src", "h")  # older callers: no inputs
    first, second = store.list_revisions(RUN)
    assert (first.revision, second.revision) == (number, bare)
    assert first.args_digest == sha256_hex(args) and first.envelope_digest == sha256_hex(env)
    assert second.args_digest is None and second.envelope_digest is None
    assert store.get_blobs(RUN, [first.args_digest, first.envelope_digest, "f" * 64]) == {
        first.args_digest: args, first.envelope_digest: env}


def test_blobs_are_written_once_and_scoped_to_their_run(store):
    store.ensure_run(RUN)
    store.ensure_run("other")
    args = args_bytes({"shots": ["x"]})
    for _ in range(2):  # the same bytes again: the same blob, no conflict
        number = store.add_revision(RUN, "src", "h", args=args)
        store.finish_revision(RUN, number, "failed", {})
    assert {r.args_digest for r in store.list_revisions(RUN)} == {sha256_hex(args)}
    assert store.get_blobs(RUN, [sha256_hex(args)]) == {sha256_hex(args): args}
    assert store.get_blobs("other", [sha256_hex(args)]) == {}
    assert store.get_blobs(RUN, []) == {}


def test_payload_bytes_hash_to_the_call_digest():
    payload = {"prompt": "a gull", "size": "1024x1024"}
    assert sha256_hex(payload_bytes(payload)) == call_digest(payload)
    assert sha256_hex(payload_bytes(payload, 3)) == call_digest(payload, 3)


def test_resolve_inputs_reuses_the_latest_stored_inputs(store):
    fresh = resolve_inputs(store, "new-run")
    assert (fresh.args, fresh.envelope, fresh.notes()) == ({}, Envelope(), [])
    store.ensure_run(RUN)
    tight = Envelope(budget=Budget(max_calls=3))
    store.add_revision(RUN, "src", "h", args=args_bytes({"shots": ["a"]}),
                       envelope=envelope_bytes(tight))
    reused = resolve_inputs(store, RUN)
    assert reused.args == {"shots": ["a"]} and reused.envelope == tight
    assert reused.args_choice.source == "stored" and not reused.args_choice.differs
    notes = reused.notes()
    assert "reusing the args stored with revision 1" in notes[0]
    assert "reusing the envelope stored with revision 1" in notes[1]

    given = resolve_inputs(store, RUN, args={"shots": ["b"]}, envelope=tight)
    assert given.args == {"shots": ["b"]} and given.args_choice.differs
    assert not given.envelope_choice.differs
    [note] = given.notes()
    assert note.startswith("the args differ from the ones stored with revision 1")

    same = resolve_inputs(store, RUN, args={"shots": ["a"]})
    assert same.notes()[0].startswith("reusing the envelope")  # the args: nothing to say
    assert json.loads(json.dumps(same.to_json())) == same.to_json()


def test_a_given_null_is_not_missing(store):
    store.ensure_run(RUN)
    store.add_revision(RUN, "src", "h", args=args_bytes({"a": 1}),
                       envelope=envelope_bytes(Envelope()))
    assert resolve_inputs(store, RUN, args=None).args is None
    assert resolve_inputs(store, RUN, args=MISSING).args == {"a": 1}


def test_revisions_without_stored_inputs_say_so(store):
    store.ensure_run(RUN)
    store.add_revision(RUN, "src", "h")
    inputs = resolve_inputs(store, RUN)
    assert inputs.args == {} and inputs.args_choice.source == "default"
    assert any("has no stored args" in n for n in inputs.notes())


def test_missing_or_invalid_stored_inputs_fail_closed(store):
    store.ensure_run(RUN)
    store.add_revision(RUN, "src", "h", args=args_bytes({}),
                       envelope=b'{"grants": ["no.such.capability"]}')
    with pytest.raises(InputError, match=r"no longer valid.*pass --envelope"):
        resolve_inputs(store, RUN)
    assert resolve_inputs(store, RUN, envelope=Envelope()).args == {}
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM blobs")
    with pytest.raises(StoreError, match="missing from the store"):
        resolve_inputs(store, RUN)

"""Golden run records (``tests/fixtures/golden``, written by ``python -m tests.golden.record``
from real embedded runs) loaded into a fresh SQLite and PostgreSQL store: the certificate
recomputes to the recorded digest, ``revise report --json`` computes the recorded report
from the rows, and a tampered record is the typed mismatch (the certificate's
differences, the report's certificate check)."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.certificate import build_certificate, verify
from orchestrator.inspect import report_view

from .records import as_json, load_run, read, tampered

NAMES = ("fanout", "failed", "race", "repair")


@pytest.fixture(params=NAMES)
def record(request) -> dict[str, Any]:
    return read(request.param)


def _checked(store, run_id: str):
    persisted = store.latest_certificate(run_id)
    return verify(persisted.digest, persisted.entries, store.list_slots(run_id))


def test_each_record_is_the_run_it_names() -> None:
    """A record made again must keep its shape, or it no longer guards what it says."""
    shapes = {name: read(name)["expected"]["report"] for name in NAMES}
    fanout, failed, race, repair = (shapes[n] for n in NAMES)
    assert [r["status"] for r in fanout["revisions"]] == ["succeeded"]
    assert fanout["revisions"][0]["calls"]["executed"] == len(fanout["slots"]) == 4
    assert [r["status"] for r in failed["revisions"]] == ["failed"]
    assert failed["revisions"][0]["error"]["type"] == "CapabilityError"
    assert (failed["spend"]["attempts"], failed["spend"]["succeeded"]) == (4, 3)
    # the second revision replays the winner and the race's decision, and pays nothing
    assert [(r["calls"]["executed"], r["calls"]["replayed"]) for r in race["revisions"]] == [
        (3, 0), (0, 2)]
    assert [r["status"] for r in repair["revisions"]] == ["failed", "succeeded"]
    assert repair["revisions"][1]["calls"]["replayed"] == 3
    assert repair["revisions"][1]["relocations"] and repair["refused_candidates"]
    # the report's certificate check covers every committed slot (a race's decision too)
    assert all(shape["certificate"]["differences"] == [] for shape in shapes.values())


def test_the_certificate_recomputes_to_the_recorded_digest(record, store) -> None:
    load_run(store, record)
    run_id, digest = record["run_id"], record["expected"]["certificate_digest"]
    slots = store.list_slots(run_id)
    assert build_certificate(slots).digest == digest
    checked = _checked(store, run_id)
    assert (checked.digest, checked.differences) == (digest, ())
    assert store.list_revisions(run_id)[-1].summary["certificate"]["digest"] == digest


def test_the_report_is_computed_again_from_the_rows(record, store) -> None:
    load_run(store, record)
    assert as_json(report_view(store, record["run_id"])) == record["expected"]["report"]


def test_a_changed_result_is_a_changed_entry(record, store) -> None:
    slot = record["rows"]["slots"][0]
    load_run(store, tampered(record, "slots", 0, result={"tampered": True}))
    run_id = record["run_id"]
    checked = _checked(store, run_id)
    assert [(d["kind"], d["site"], d["occurrence"]) for d in checked.differences] == [
        ("changed", slot["site"], slot["occurrence"])]
    assert checked.digest != record["expected"]["certificate_digest"]
    report = report_view(store, run_id)
    assert report["certificate"]["differences"] == list(checked.differences)


def test_a_lost_slot_is_a_missing_entry(store) -> None:
    record = read("repair")
    slot = record["rows"]["slots"][-1]
    load_run(store, tampered(record, "slots", len(record["rows"]["slots"]) - 1, gone=True))
    checked = _checked(store, record["run_id"])
    assert [(d["kind"], d["site"]) for d in checked.differences] == [("missing", slot["site"])]


def test_a_rewritten_digest_is_a_digest_mismatch(store) -> None:
    record = read("fanout")
    load_run(store, tampered(record, "certificates", 0, digest="0" * 64))
    checked = _checked(store, record["run_id"])
    assert [d["kind"] for d in checked.differences] == ["digest_mismatch"]
    assert checked.digest == record["expected"]["certificate_digest"]  # the slots are intact

"""The core issue's scenarios, counted from the provider log (not from the store)."""

from __future__ import annotations

import random

import pytest

from broker.envelope import Envelope
from broker.settings import LedgerPolicy, OrphanPolicy

from .conftest import Harness


def _executions(harness: Harness) -> int:
    return len(harness.provider_log())


def test_e3_append_replays_prefix_and_literal_edit_is_gated(harness: Harness) -> None:
    first = harness.run("e3_v1")
    assert first["status"] == "failed"
    assert first["error"]["type"] == "RuntimeError"
    assert first["calls"]["executed"] == 2

    second = harness.run("e3_v2")
    assert second["status"] == "succeeded"
    assert (second["calls"]["replayed"], second["calls"]["executed"]) == (2, 1)
    assert second["certificate"]["entries"] == 3
    assert second["certificate"]["differences"] == []

    third = harness.run("e3_v3")
    assert third["status"] == "stopped"
    kinds = [c["kind"] for c in third["gate"]["counterexamples"]]
    assert kinds == ["call_changed"]
    assert third["certificate"]["entries"] == 3  # the prefix, recomputed from the store
    assert third["certificate"]["differences"] == []
    assert third["calls"]["executed"] == 0
    assert _executions(harness) == 3


@pytest.mark.parametrize("width", [4, 8, 16, 32])
def test_fanout_failure_repair_costs_n_plus_one(harness: Harness, width: int) -> None:
    args = {"shots": [f"shot {i}" for i in range(width)]}
    first = harness.run("fanout_v1", args=args)
    assert first["status"] == "failed"
    assert first["error"]["type"] == "CapabilityError"  # the host's own answer, vouched for
    assert first["error"]["code"] and first["error"]["identity"]
    assert first["calls"] == {"executed": width, "succeeded": width - 1, "failed": 1,
                              "uncertain": 0,
                              "replayed": 0, "denied": 0}

    repair = harness.run("fanout_repaired", args=args)
    assert repair["status"] == "succeeded"
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (width - 1, 1)
    assert len(repair["result"]) == width
    assert _executions(harness) == width + 1
    rejected = [e for e in harness.provider_log() if e["outcome"] == "error"]
    assert len(rejected) == 1


def test_replayed_artifacts_are_the_committed_ones(harness: Harness) -> None:
    args = {"shots": ["a", "b", "c", "d"]}
    harness.run("fanout_v1", args=args)
    committed = {str(s.identity): s.result["artifact"]["id"]
                 for s in harness.services.store.list_slots("run-1")}
    repair = harness.run("fanout_repaired", args=args)
    assert set(committed.values()) <= set(repair["result"])
    for artifact_id in repair["result"]:
        assert harness.services.artifacts.exists(artifact_id)


def test_relocation_into_helper_replays_through_the_remap(harness: Harness) -> None:
    args = {"shots": ["a", "b", "c", "d"]}
    harness.run("fanout_v1", args=args)
    before = _executions(harness)
    moved = harness.run("fanout_relocated", args=args)
    assert moved["status"] == "succeeded", moved["error"]
    assert [(r["from"], r["to"]) for r in moved["gate"]["relocations"]] == [
        ("orchestrate/#0>orchestrate.gen/#0", "orchestrate/#0>gen_one/#0")]
    assert (moved["calls"]["replayed"], moved["calls"]["executed"]) == (3, 1)
    assert _executions(harness) == before + 1  # only the shot that never committed


def test_relocation_into_helper_is_stopped_under_the_strict_gate(make_harness) -> None:
    harness = make_harness(relocation="stop")
    args = {"shots": ["a", "b", "c", "d"]}
    harness.run("fanout_v1", args=args)
    before = _executions(harness)
    moved = harness.run("fanout_relocated", args=args)
    assert moved["status"] == "stopped"
    assert moved["error"]["type"] == "GateRejected"
    assert [c["kind"] for c in moved["gate"]["counterexamples"]] == ["removed"]
    assert moved["calls"]["executed"] == 0
    assert _executions(harness) == before


def test_data_dependent_payload_change_diverges_before_dispatch(harness: Harness) -> None:
    harness.run("payload_v1")
    assert _executions(harness) == 1
    repair = harness.run("payload_v2")
    assert repair["gate"]["accepted"] is True
    assert repair["status"] == "stopped"
    assert repair["error"]["type"] == "ReplayDivergence"
    assert repair["error"]["identity"] == "orchestrate/#0@:0"
    assert repair["calls"]["executed"] == 0
    assert [i["outcome"] for i in repair["identities"]] == ["diverged"]
    assert _executions(harness) == 1


def test_a_constant_payload_in_a_loop_is_a_repeat_in_its_own_revision(harness: Harness
                                                                       ) -> None:
    """The ledger counts the running revision: the second pass of a loop that asks for
    the same image is denied under auto (one payment), and a widened repair replays the
    one it has and is denied at the next."""
    first = harness.run("loop3")
    assert (first["status"], first["error"]["type"]) == ("stopped", "SemanticRepeatDenied")
    assert "earlier in this revision" in first["error"]["message"]
    assert "take=" not in first["error"]["message"]
    assert _executions(harness) == 1
    widened = harness.run("loop6")
    assert widened["status"] == "stopped"
    assert widened["error"]["type"] == "SemanticRepeatDenied"
    assert widened["calls"]["replayed"] == 1
    assert widened["calls"]["denied"] == 1
    assert _executions(harness) == 1


def test_widened_loop_under_warn_executes_and_names_the_repeats(harness: Harness) -> None:
    warn = Envelope(ledger_policy=LedgerPolicy.WARN)
    first = harness.run("loop3", envelope=warn)
    assert len([w for w in first["warnings"] if "semantic repeat" in w]) == 2
    widened = harness.run("loop6", envelope=warn)
    assert widened["status"] == "succeeded"
    assert widened["calls"]["executed"] == 3
    repeats = [w for w in widened["warnings"] if "semantic repeat" in w]
    assert len(repeats) == 3


def test_inserted_helper_call_pays_only_for_the_new_branch(harness: Harness) -> None:
    harness.run("branches_v1")
    assert _executions(harness) == 2
    shifted = harness.run("branches_v2")
    assert shifted["status"] == "succeeded", shifted["error"]
    assert (shifted["calls"]["replayed"], shifted["calls"]["executed"]) == (2, 1)
    assert _executions(harness) == 3


def test_a_front_insert_in_a_fanout_relocates_the_shifted_calls_and_pays_the_new_one(
        harness: Harness) -> None:
    """Every committed door moves one path on; the new door lands at path (0,), where the
    red door was committed. The red door moved (it relocates), it was not edited: the new
    door is new work, stored aside, and the committed slot stays."""
    prompts = {"prompts": ["a red door", "a blue door", "a grey door"]}
    harness.run("shift_v1", args=prompts)
    assert _executions(harness) == 3
    shifted = harness.run("shift_v2", args=prompts)
    assert shifted["status"] == "succeeded", shifted["error"]
    assert (shifted["calls"]["replayed"], shifted["calls"]["executed"]) == (3, 1)
    assert _executions(harness) == 4
    slots = {str(s.identity): s for s in harness.services.store.list_slots("run-1")}
    site = next(iter(slots)).split("@")[0]
    assert slots[f"{site}@0:0"].revision == 1  # the red door's slot stays as committed
    aside = slots[f"{site}@0.1000002:0"]
    assert aside.revision == 2 and any("stored at" in w for w in shifted["warnings"])
    again = harness.run("shift_v2", args=prompts)  # the next revision replays all four
    assert (again["calls"]["replayed"], again["calls"]["executed"]) == (4, 0)
    assert _executions(harness) == 4


def test_shrunk_loop_reports_orphans(harness: Harness) -> None:
    harness.run("shrink_v1")
    shrunk = harness.run("shrink_v2")
    assert shrunk["status"] == "succeeded"
    assert [o["identity"] for o in shrunk["orphans"]] == ["orchestrate/for0/#0@:1",
                                                         "orchestrate/for0/#0@:2"]
    assert harness.services.store.list_orphans("run-1")


def test_shrunk_loop_fails_under_orphan_policy_stop(harness: Harness) -> None:
    harness.run("shrink_v1")
    shrunk = harness.run("shrink_v2", envelope=Envelope(orphan_policy=OrphanPolicy.STOP))
    assert shrunk["status"] == "failed"
    assert shrunk["error"]["type"] == "OrphanStop"
    assert len(shrunk["orphans"]) == 2


def test_fanout_identity_ignores_completion_order(make_harness) -> None:
    order = list(range(8))
    random.Random(7).shuffle(order)  # a finishing order far from the branch order
    delays = {f"shot {i}": 0.04 * rank for i, rank in enumerate(order)}
    args = {"shots": list(delays)}
    wide = Envelope(concurrency=8)
    first = make_harness(home="shared", latency=lambda cap, p: delays.get(p.get("prompt"), 0))
    assert first.run("fanout_v1", args=args, envelope=wide)["calls"]["succeeded"] == 7
    finished_first = [e["identity"] for e in first.provider_log()]

    reversed_delays = {k: 0.28 - v for k, v in delays.items()}
    replay = make_harness(home="shared",
                          latency=lambda cap, p: reversed_delays.get(p.get("prompt"), 0))
    repair = replay.run("fanout_repaired", args=args, envelope=wide)
    assert repair["status"] == "succeeded"
    assert (repair["calls"]["replayed"], repair["calls"]["executed"]) == (7, 1)
    assert all(i["outcome"] != "diverged" for i in repair["identities"])
    assert finished_first != sorted(finished_first)  # the first run did finish out of order


def test_payload_digest_ignores_key_order(harness: Harness) -> None:
    harness.run("keyorder_v1")
    again = harness.run("keyorder_v2")
    assert again["status"] == "succeeded"
    assert again["calls"]["replayed"] == 1
    assert again["calls"]["executed"] == 0

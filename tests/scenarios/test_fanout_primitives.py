"""Runtime semantics of the fanout primitives: paths, race winners, parallel failures."""

from __future__ import annotations

import pytest

from .conftest import Harness


@pytest.fixture
def sandbox_kind() -> str:
    return "process"


def test_race_replays_the_same_winner_when_latencies_flip(make_harness) -> None:
    fast_calm = {"tagline, bold": 0.3, "tagline, calm": 0.0, "tagline, witty": 0.3}
    first = make_harness(home="shared",
                         latency=lambda cap, p: fast_calm.get(p.get("prompt"), 0))
    won = first.run("race_v1")
    assert won["status"] == "succeeded"
    race = [s for s in first.services.store.list_slots("run-1") if s.capability == "ctx.race"]
    assert [s.result["index"] for s in race] == [1]  # "calm" answered first
    fast_bold = {"tagline, bold": 0.0, "tagline, calm": 0.3, "tagline, witty": 0.3}
    replay = make_harness(home="shared",
                          latency=lambda cap, p: fast_bold.get(p.get("prompt"), 0))
    again = replay.run("race_v1")
    assert again["result"] == won["result"], "the recorded winner is replayed"
    assert again["calls"]["executed"] == 0
    calls = [i for i in again["identities"] if i["capability"] != "ctx.race"]
    assert [i["path"] for i in calls] == [[1]]


def test_a_reordered_race_replays_its_winner_by_identity(make_harness) -> None:
    fast_calm = {"tagline, bold": 0.3, "tagline, calm": 0.0, "tagline, witty": 0.3}
    first = make_harness(home="shared",
                         latency=lambda cap, p: fast_calm.get(p.get("prompt"), 0))
    won = first.run("race_v1")
    reordered = make_harness(home="shared", latency=lambda cap, p: 0)
    again = reordered.run("race_reordered")
    assert again["status"] == "succeeded", again["error"]
    assert again["result"] == won["result"], "the committed winner, wherever it now stands"
    assert again["calls"]["executed"] == 0


def test_pipeline_and_dag_push_branch_indices(harness: Harness) -> None:
    report = harness.run("primitives")
    assert report["status"] == "succeeded", report["error"]
    paths = {(i["capability"], tuple(i["path"])) for i in report["identities"]}
    assert paths == {("storyboard.plan", (0,)), ("image.generate", (1,)),
                     ("text.generate", (0,)), ("review.visual", (1,))}
    again = harness.run("primitives")
    assert again["calls"]["replayed"] == 4 and again["calls"]["executed"] == 0
    assert again["result"] == report["result"]


def test_parallel_finishes_every_branch_before_raising(harness: Harness) -> None:
    report = harness.run("parallel_failure")
    assert report["status"] == "succeeded"
    assert report["result"] == {"caught": "invalid_parameter"}
    assert report["calls"]["succeeded"] == 2 and report["calls"]["failed"] == 1
    committed = {tuple(s.identity.path) for s in harness.services.store.list_slots("run-1")}
    assert committed == {(0,), (2,)}

"""The host admits a frame only at a fanout path the admitted script can give its site
(``orchestrator.frames``): each index below the width of the fanout around it there (an
item written in place: its own index), as many indices as fanouts; a replayed race's
committed branch index whatever the race's width now. A legitimate repair that narrows a
race still replays its winner."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope, SandboxLimits
from broker.errors import SandboxProtocolError
from broker.identity import Identity
from broker.prefix import RACE, Prefix
from broker.records import SlotRecord
from orchestrator.annotate import annotate
from orchestrator.embedded import open_services
from orchestrator.frames import ReachablePaths
from sandbox.runner import ProcessRunner
from tests.crash.kit import settings_for

SCRIPT = '''async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})

    async def row(i):
        return await ctx.parallel([gen(f"{i} {j}") for j in range(3)])

    first = await ctx.run("text.generate", {"prompt": "plan"})
    rows = await ctx.parallel([row(i) for i in range(2)])
    won = await ctx.race([gen("a"), gen("b")])
    return 1
'''
SITES = {s.site: s for s in annotate(SCRIPT).sites}
INNER = SITES["orchestrate/#1>orchestrate.row/#0>orchestrate.gen/#0"]
PLAN = SITES["orchestrate/#0"]
BRANCH = SITES["orchestrate/#3>orchestrate.gen/#0"]


def _race_slot(index: int) -> SlotRecord:
    return SlotRecord(run_id="r", identity=Identity("orchestrate/#2", (), 0), capability=RACE,
                      digest="d", fingerprint="f", result={"winner": {}, "index": index})


def _paths(*slots: SlotRecord) -> ReachablePaths:
    return ReachablePaths(lambda site: site, Prefix(slots, revision=2))


@pytest.mark.parametrize(("site", "path"), [
    (PLAN, []), (INNER, [0, 0]), (INNER, [1, 2]), (BRANCH, [0])])
def test_paths_the_script_reaches_are_admitted(site, path) -> None:
    _paths().check(site, path)


@pytest.mark.parametrize(("site", "path", "why"), [
    (PLAN, [0], "longer than the fanouts around it"),
    (INNER, [2, 0], "past the outer fanout's width"),
    (INNER, [0, 3], "past the inner fanout's width"),
    (INNER, [0], "shorter than the fanouts around it"),
    (INNER, [0, 0, 0], "longer than the fanouts around it"),
    (BRANCH, [2], "past the race's width, nothing committed there"),
    (BRANCH, [1], "the other literal item's index"),
])
def test_paths_it_cannot_reach_stop_the_run(site, path, why) -> None:
    with pytest.raises(SandboxProtocolError, match="cannot reach") as caught:
        _paths().check(site, path)
    assert caught.value.site == site.site, why


def test_a_replayed_race_keeps_its_committed_branch_index() -> None:
    _paths(_race_slot(4)).check(BRANCH, [4])
    with pytest.raises(SandboxProtocolError):
        _paths(_race_slot(4)).check(BRANCH, [3])


NARROW_V1 = '''async def orchestrate(ctx, args):
    async def attempt(size):
        return await ctx.run("image.generate", {"prompt": "key art", "size": size})

    art = await ctx.race([attempt(s) for s in ["999x999", "1x1", "1024x1024"]])
    return await ctx.run("image.generate", {"prompt": "poster", "size": "999x999"})
'''
NARROW_V2 = NARROW_V1.replace('["999x999", "1x1", "1024x1024"]', '["1024x1024"]').replace(
    '"poster", "size": "999x999"', '"poster", "size": "512x512"')


def test_a_repair_that_narrows_a_race_replays_its_winner(tmp_path: Path) -> None:
    """The winner (branch 2 of 3) replays at path [2] in a race that is one branch wide
    now: the host admits the committed index, not only those below the new width."""
    services = open_services(settings_for(tmp_path), runner=ProcessRunner())
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=60))
    try:
        first = services.pipeline().run("narrow", NARROW_V1, {}, envelope).to_json()
        assert first["status"] == "failed", first["error"]
        second = services.pipeline().run("narrow", NARROW_V2, {}, envelope).to_json()
        assert second["status"] == "succeeded", second["error"]
        replayed = {(i["site"], tuple(i["path"])) for i in second["identities"]
                    if i["outcome"] == "replayed"}
        assert ("orchestrate/#1>orchestrate.attempt/#0", (2,)) in replayed
        assert second["calls"]["executed"] == 1  # the poster; the key art replayed
    finally:
        services.close()

"""A hostile sandbox (checker bypassed) commits a race whose winner is a call made
outside the race: a parallel item at the same branch index. The host checks that the
winner's first call reached it at the race's branch path and was answered, but not that
it is a call of one of the race's own branches, so the race is frozen with a winner no
revision of the script can make again, and every honest revision stops there."""

from __future__ import annotations

from broker.envelope import Envelope, SandboxLimits

from .corpus import script
from .harness import run_unchecked

_SCRIPT = script('''
if args.get("mode") == "honest":
    won = await ctx.race([ctx.run("text.generate", {"prompt": "a"}),
                          ctx.run("text.generate", {"prompt": "b"})])
    both = await ctx.parallel([ctx.run("text.generate", {"prompt": "c"}),
                               ctx.run("text.generate", {"prompt": "d"})])
    return [won["text"], [b["text"] for b in both]]
sched = g["_SCHEDULER"]
race = {"site": "orchestrate/if0/#0", "path": [], "occurrence": 0}
item = {"capability": "text.generate", "payload": {"prompt": "c"}, "take": 1}
def ask(frame):
    sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [frame]})
    return sched.channel.receive()
ask({"seq": 1, "kind": "race_lookup", **race, "branches": [
    {"site": "orchestrate/if0/#3", **item},
    {"site": "orchestrate/if0/#4", **item, "payload": {"prompt": "d"}}]})
ask({"seq": 2, "kind": "call", "site": "orchestrate/if0/#3", "path": [0],
     "occurrence": 0, **item})
ask({"seq": 3, "kind": "race_commit", **race, "winner": 0})
return "raced"
''')


def test_a_race_is_never_won_by_a_call_outside_its_branches(process_services) -> None:
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=20))
    first = run_unchecked(process_services, "race-elsewhere",
                          _SCRIPT, {"mode": "hostile"}, envelope)
    frozen = [s for s in process_services.store.list_slots("race-elsewhere")
              if s.capability == "ctx.race"]
    # The honest revision of the same script after it must not be stopped at the race.
    second = run_unchecked(process_services, "race-elsewhere",
                           _SCRIPT, {"mode": "honest"}, envelope)
    assert not frozen and second["status"] == "succeeded", (
        f"revision 1 ({first['status']}) froze the race with winner "
        f"{[s.result for s in frozen]}; the honest revision 2 ended {second['status']}: "
        f"{second['error']}")

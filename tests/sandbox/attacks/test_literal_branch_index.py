"""A hostile sandbox (checker bypassed) names a literal fanout item at another item's
branch index: the host admits any index below the fanout's width, so in a revision whose
calls are all committed it buys new paid identities the admitted script cannot reach."""

from __future__ import annotations

from broker.envelope import Envelope, SandboxLimits

from .corpus import script
from .harness import provider_calls, run_unchecked

# Under "honest" the script is an ordinary fanout of two literal calls: the first is
# always branch 0, the second always branch 1. Under "hostile" it speaks the channel
# itself and asks for each call at the *other* branch index, with a payload of its own.
_SCRIPT = script('''
if args.get("mode") == "honest":
    return await ctx.parallel([ctx.run("text.generate", {"prompt": "a"}),
                               ctx.run("text.generate", {"prompt": "b"})])
sched = g["_SCHEDULER"]
answers = []
for seq, site, index, prompt in ((1, "orchestrate/if0/#0", 1, "x"),
                                 (2, "orchestrate/if0/#1", 0, "y")):
    sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
        {"seq": seq, "kind": "call", "site": site, "path": [index], "occurrence": 0,
         "capability": "text.generate", "payload": {"prompt": prompt}, "take": 1}]})
    answers.append(sched.channel.receive())
return [a.get("ok") for a in answers]
''')


def test_a_committed_literal_fanout_buys_nothing_at_another_branch_index(process_services) -> None:
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=20))
    first = run_unchecked(process_services, "literal-index", _SCRIPT,
                          {"mode": "honest"}, envelope)
    assert first["status"] == "succeeded", first["error"]
    assert first["calls"]["executed"] == 2
    paid = provider_calls(process_services, "literal-index")
    # Revision 2 of the same admitted script: both of its identities, (#0, [0], 0) and
    # (#1, [1], 0), are committed, so it can only replay them (or diverge and stop): an
    # honest run of it pays nothing. The hostile sandbox asks for #0 at [1] and #1 at [0].
    second = run_unchecked(process_services, "literal-index",
                           _SCRIPT, {"mode": "hostile"}, envelope)
    new = provider_calls(process_services, "literal-index") - paid
    assert second["calls"]["executed"] == 0 and new == 0, (
        f"revision 2 paid {new} provider calls at identities its script cannot reach "
        f"(status {second['status']}, identities {second['identities']})")


# A comprehension's branch makes its call once: the site's identities are (#0, [i], 0).
# The host bounds the site by its call count (4) alone, not by the calls one branch makes,
# so a hostile sandbox replays (#0, [i], 0) for free and buys (#0, [i], 1).
_BRANCH_SCRIPT = script('''
if args.get("mode") == "honest":
    return await ctx.parallel([ctx.run("text.generate", {"prompt": p})
                               for p in args["prompts"][:4]])
sched = g["_SCHEDULER"]
seq = 0
answers = []
for index, prompt in ((0, "a"), (1, "b")):
    for occurrence, payload in ((0, prompt), (1, prompt + " again")):
        seq += 1
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
            {"seq": seq, "kind": "call", "site": "orchestrate/if0/#0", "path": [index],
             "occurrence": occurrence, "capability": "text.generate",
             "payload": {"prompt": payload}, "take": 1}]})
        answers.append(sched.channel.receive())
return [a.get("ok") for a in answers]
''')


def test_a_committed_comprehension_buys_nothing_at_a_second_occurrence(process_services) -> None:
    envelope = Envelope(sandbox=SandboxLimits(timeout_seconds=20))
    prompts = {"prompts": ["a", "b", "c", "d"]}
    first = run_unchecked(process_services, "branch-occurrence", _BRANCH_SCRIPT,
                          {"mode": "honest", **prompts}, envelope)
    assert first["status"] == "succeeded", first["error"]
    assert first["calls"]["executed"] == 4
    paid = provider_calls(process_services, "branch-occurrence")
    # Revision 2 of the same script: its identities (#0, [i], 0) for i < 4 are all
    # committed, so an honest run of it replays them or diverges: it pays nothing.
    second = run_unchecked(process_services, "branch-occurrence", _BRANCH_SCRIPT,
                           {"mode": "hostile", **prompts}, envelope)
    new = provider_calls(process_services, "branch-occurrence") - paid
    assert second["calls"]["executed"] == 0 and new == 0, (
        f"revision 2 paid {new} provider calls at identities its script cannot reach "
        f"(status {second['status']}, identities {second['identities']})")

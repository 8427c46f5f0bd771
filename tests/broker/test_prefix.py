"""The decision on each call of a revision, from the committed prefix (pure, no I/O)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.identity import Identity
from broker.prefix import Call, Prefix, Verdict
from broker.records import SlotRecord

CAP = "image.generate"


def slot(site: str, path: tuple[int, ...], occ: int, digest: str, *, fp: str = "fp",
         capability: str = CAP, revision: int = 1) -> SlotRecord:
    return SlotRecord(run_id="r", identity=Identity(site, path, occ), capability=capability,
                      digest=digest, fingerprint=fp, result={"of": digest}, revision=revision)


def call(site: str, path: tuple[int, ...], occ: int, digest: str, *, fp: str = "fp",
         capability: str = CAP) -> Call:
    return Call(Identity(site, path, occ), capability, digest, fp)


def test_the_same_identity_and_payload_replays() -> None:
    prefix = Prefix([slot("s", (), 0, "a")], revision=2)
    decision = prefix.decide(call("s", (), 0, "a"))
    assert decision.verdict is Verdict.REPLAY and decision.slot.result == {"of": "a"}
    assert prefix.orphans() == []


def test_a_changed_payload_at_a_committed_identity_diverges() -> None:
    prefix = Prefix([slot("s", (), 0, "a")], revision=2)
    assert prefix.decide(call("s", (), 0, "b")).verdict is Verdict.DIVERGE


def test_a_changed_capability_at_a_committed_identity_diverges() -> None:
    prefix = Prefix([slot("s", (), 0, "a")], revision=2)
    assert prefix.decide(call("s", (), 0, "a", capability="text.generate")).verdict is \
        Verdict.DIVERGE


def test_swapped_occurrences_of_one_call_each_replay_their_own_payload() -> None:
    prefix = Prefix([slot("s", (), 0, "cat"), slot("s", (), 1, "dog")], revision=2)
    first, second = prefix.decide(call("s", (), 0, "dog")), prefix.decide(call("s", (), 1, "cat"))
    assert (first.verdict, first.slot.result) == (Verdict.RELOCATED, {"of": "dog"})
    assert (second.verdict, second.slot.result) == (Verdict.RELOCATED, {"of": "cat"})


def test_a_shifted_fanout_path_replays_the_same_call() -> None:
    prefix = Prefix([slot("s", (0,), 0, "red"), slot("s", (1,), 0, "blue")], revision=2)
    decisions = prefix.decide_wave([call("t", (0,), 0, "green"), call("s", (1,), 0, "red"),
                                    call("s", (2,), 0, "blue")])
    assert [d.verdict for d in decisions] == [Verdict.NEW, Verdict.RELOCATED,
                                              Verdict.RELOCATED]


def test_a_wave_gives_exact_identities_their_slots_before_relocations() -> None:
    prefix = Prefix([slot("s", (0,), 0, "a"), slot("s", (1,), 0, "a")], revision=2)
    # The second call owns (1,); the first must not take it although it comes first.
    decisions = prefix.decide_wave([call("s", (2,), 0, "a"), call("s", (1,), 0, "a")])
    assert decisions[1].verdict is Verdict.REPLAY
    assert decisions[0].verdict is Verdict.RELOCATED
    assert decisions[0].slot.identity == Identity("s", (0,), 0)


def test_a_slot_serves_at_most_one_call_then_it_is_used() -> None:
    prefix = Prefix([slot("s", (), 0, "a")], revision=2)
    assert prefix.decide(call("s", (5,), 0, "a")).verdict is Verdict.RELOCATED
    again = prefix.decide(call("s", (), 0, "a"))
    assert again.verdict is Verdict.USED  # its slot already served the call above


def test_another_call_expression_with_a_paid_payload_is_a_repeat_not_a_replay() -> None:
    prefix = Prefix([slot("s", (), 0, "a", fp="one")], revision=2)
    decision = prefix.decide(call("t", (), 0, "a", fp="two"))
    assert decision.verdict is Verdict.REPEAT
    assert decision.slot.identity == Identity("s", (), 0)


def test_two_matching_slots_are_ambiguous_and_left_to_the_ledger() -> None:
    prefix = Prefix([slot("s", (0,), 0, "a"), slot("t", (0,), 0, "a")], revision=2)
    assert prefix.decide(call("u", (0,), 0, "a")).verdict is Verdict.REPEAT


def test_a_new_payload_is_new_work() -> None:
    prefix = Prefix([slot("s", (), 0, "a")], revision=2)
    assert prefix.decide(call("s", (), 1, "b")).verdict is Verdict.NEW
    assert prefix.orphans() == [Identity("s", (), 0)]


def test_a_different_capability_never_relocates() -> None:
    prefix = Prefix([slot("s", (), 0, "a", capability="text.generate")], revision=2)
    assert prefix.decide(call("s", (), 1, "a")).verdict is Verdict.NEW


def test_orphans_are_the_committed_identities_never_reached() -> None:
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b"), slot("s", (), 2, "c")],
                    revision=2)
    prefix.decide(call("s", (), 0, "a"))
    prefix.decide(call("s", (), 1, "z"))  # reached (and diverged): not an orphan
    assert prefix.orphans() == [Identity("s", (), 2)]


@settings(max_examples=200, deadline=None)
@given(committed=st.lists(st.tuples(st.sampled_from("st"), st.integers(0, 3),
                                    st.sampled_from("abcd"), st.sampled_from(["f", "g"])),
                          max_size=8, unique_by=lambda t: (t[0], t[1])),
       calls=st.lists(st.tuples(st.sampled_from("stu"), st.integers(0, 4),
                                st.sampled_from("abcde"), st.sampled_from(["f", "g"])),
                      max_size=10, unique_by=lambda t: (t[0], t[1])))
def test_never_a_result_for_another_call_and_never_one_result_twice(committed, calls) -> None:
    prefix = Prefix([slot(s, (), o, d, fp=f) for s, o, d, f in committed], revision=2)
    decisions = prefix.decide_wave([call(s, (), o, d, fp=f) for s, o, d, f in calls])
    served: list[Identity] = []
    for (_site, _occ, digest, fp), decision in zip(calls, decisions, strict=True):
        if decision.replays:
            # Only a slot of the same call expression with the same payload is ever reused.
            assert (decision.slot.digest, decision.slot.fingerprint) == (digest, fp)
            served.append(decision.slot.identity)
        if decision.verdict is Verdict.NEW:
            assert all(not (d == digest) for *_, d, _f in committed), "a paid payload is new"
            if decision.stored_at is not None:  # never over a committed slot
                assert decision.stored_at not in {Identity(s, (), o) for s, o, *_ in committed}
    assert len(served) == len(set(served)), "one committed result served to two calls"


def test_a_call_landing_where_a_moved_call_was_committed_is_new_work_stored_aside() -> None:
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b")], revision=3)
    assert prefix.decide(call("s", (), 0, "b")).verdict is Verdict.RELOCATED  # b moved up
    landed = prefix.decide(call("s", (), 1, "c"))  # where b was: not an edit of b
    assert landed.verdict is Verdict.NEW
    assert landed.stored_at == Identity("s", (1_000_003,), 1)
    assert prefix.orphans() == [Identity("s", (), 0)]


def test_a_wave_relocates_before_it_judges_the_calls_left_whatever_their_order() -> None:
    prefix = Prefix([slot("s", (0,), 0, "a"), slot("s", (1,), 0, "b")], revision=2)
    # A rebatched fanout: "b" moved to branch 0, a new "c" takes branch 1, listed first.
    decisions = prefix.decide_wave([call("s", (1,), 0, "c"), call("s", (0,), 0, "b"),
                                    call("s", (2,), 0, "a")])
    assert [d.verdict for d in decisions] == [Verdict.NEW, Verdict.RELOCATED,
                                              Verdict.RELOCATED]
    assert decisions[0].stored_at == Identity("s", (1, 1_000_002), 0)


def test_work_stored_aside_is_replayed_by_relocation_in_a_later_revision() -> None:
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b"),
                     slot("s", (1_000_002,), 1, "c", revision=2)], revision=3)
    decisions = [prefix.decide(call("s", (), 0, "b")), prefix.decide(call("s", (), 1, "c"))]
    assert [d.verdict for d in decisions] == [Verdict.RELOCATED, Verdict.RELOCATED]
    assert decisions[1].slot.identity == Identity("s", (1_000_002,), 1)


def test_a_landing_call_is_still_judged_by_the_ledger_and_by_its_expression() -> None:
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b"), slot("t", (), 0, "z",
                                                                          fp="other")],
                    revision=2)
    prefix.decide(call("s", (), 0, "b"))
    repeat = prefix.decide(call("s", (), 1, "z"))  # paid at t: a repeat, never new work
    assert (repeat.verdict, repeat.slot.identity) == (Verdict.REPEAT, Identity("t", (), 0))
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b")], revision=2)
    prefix.decide(call("s", (), 0, "b"))
    assert prefix.decide(call("s", (), 1, "c", fp="edited")).verdict is Verdict.DIVERGE


def test_two_landing_calls_of_one_payload_are_a_repeat_of_the_first() -> None:
    prefix = Prefix([slot("s", (), 0, "a"), slot("s", (), 1, "b"), slot("s", (), 2, "c")],
                    revision=2)
    assert prefix.decide(call("s", (), 0, "c")).verdict is Verdict.RELOCATED
    assert prefix.decide(call("s", (), 1, "a")).verdict is Verdict.RELOCATED
    first = prefix.decide(call("s", (), 2, "d"))
    assert first.verdict is Verdict.NEW and first.stored_at is not None
    again = prefix.decide(call("s", (), 3, "d"))
    assert (again.verdict, again.asked_at) == (Verdict.REPEAT, first.stored_at)


def test_a_resumed_revision_replays_its_own_calls_and_diverges_on_a_changed_one() -> None:
    """A parked job resumes by running its admitted script again: the calls its revision
    committed before it parked replay. The script and args are fixed, so a call that
    came out different could only be a script that escaped the checker's determinism
    rules; it is decided like any change at a committed identity: a divergence, which
    stops the revision before any new effect (``ReplayDivergence`` naming the identity)."""
    prefix = Prefix([slot("s", (), 0, "a", revision=3), slot("s", (), 1, "b", revision=3)],
                    revision=3)
    same = prefix.decide(call("s", (), 0, "a"))
    assert same.verdict is Verdict.REPLAY and same.slot.revision == 3
    assert prefix.decide(call("s", (), 1, "changed")).verdict is Verdict.DIVERGE

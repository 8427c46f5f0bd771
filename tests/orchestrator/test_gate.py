from __future__ import annotations

import ast

import pytest

from broker.errors import PrefixConflict
from broker.identity import Identity
from broker.records import SlotRecord
from orchestrator.gate import check_gate, frozen_sites
from orchestrator.sites import assign_sites


def slot(site: str, capability: str, fingerprint: str, occurrence: int = 0) -> SlotRecord:
    return SlotRecord("r", Identity(site, (), occurrence), capability, "d", fingerprint, {})


def sites(source: str):
    return assign_sites(ast.parse(source))


SOURCE = (
    'async def orchestrate(ctx, args):\n'
    '    return await ctx.run("text.generate", {"prompt": "x"})\n'
)


def test_accepts_when_every_frozen_site_is_kept() -> None:
    [site] = sites(SOURCE)
    result = check_gate(frozen_sites([slot(site.site, "text.generate", site.fingerprint)]),
                        sites(SOURCE))
    assert result.accepted and result.frozen == 1


def test_each_counterexample_kind() -> None:
    [site] = sites(SOURCE)
    frozen = frozen_sites([slot(site.site, "text.generate", site.fingerprint)])
    changed = check_gate(frozen, sites(SOURCE.replace('"x"', '"y"')))
    assert [c.kind for c in changed.counterexamples] == ["call_changed"]
    other = check_gate(frozen, sites(SOURCE.replace("text.generate", "image.generate")))
    assert [c.kind for c in other.counterexamples] == ["capability_changed"]
    gone = check_gate(frozen, sites("async def orchestrate(ctx, args):\n    return 1\n"))
    assert [c.kind for c in gone.counterexamples] == ["removed"]


def test_conflicting_prefix_records_fail_closed() -> None:
    with pytest.raises(PrefixConflict):
        frozen_sites([slot("s/#0", "text.generate", "f1", 0), slot("s/#0", "text.generate",
                                                                    "f2", 1)])


def test_empty_prefix_accepts_anything() -> None:
    assert check_gate({}, sites(SOURCE)).accepted


# ---- relocation: the remap of a frozen site to the one call that still makes it ------------

V1 = '''async def orchestrate(ctx, args):
    async def gen(s):
        return await ctx.run("image.generate", {"prompt": s})
    a = await gen("cat")
    b = await gen("dog")
    return [a, b]
'''


def committed(source: str):
    """A frozen prefix in which every site of ``source`` committed once."""
    return frozen_sites([SlotRecord("r", Identity(s.site, (), 0), s.capability, "d",
                                    s.fingerprint, {}, chain_fingerprint=s.chain_fingerprint,
                                    line=s.line) for s in sites(source)])


def gate(frozen, source: str, relocation: str = "remap"):
    return check_gate(frozen, sites(source), relocation=relocation)


def test_renamed_helper_relocates_and_stores_under_the_frozen_names() -> None:
    renamed = V1.replace("gen(", "make(")
    result = gate(committed(V1), renamed)
    assert result.accepted
    assert {(r.frozen, r.site) for r in result.relocations} == {
        ("orchestrate/#0>orchestrate.gen/#0", "orchestrate/#0>orchestrate.make/#0"),
        ("orchestrate/#1>orchestrate.gen/#0", "orchestrate/#1>orchestrate.make/#0")}
    assert result.storage["orchestrate/#0>orchestrate.make/#0"] == \
        "orchestrate/#0>orchestrate.gen/#0"
    strict = gate(committed(V1), renamed, relocation="stop")
    assert not strict.accepted
    assert all("REVISE_RELOCATION=stop" in c.describe() and "may move" not in c.describe()
               for c in strict.counterexamples)


def test_swapped_callers_relocate_by_their_arguments() -> None:
    swapped = V1.replace('gen("cat")', 'gen("tmp")').replace('gen("dog")', 'gen("cat")') \
        .replace('gen("tmp")', 'gen("dog")')
    result = gate(committed(V1), swapped)
    assert result.accepted
    assert result.storage["orchestrate/#1>orchestrate.gen/#0"] == \
        "orchestrate/#0>orchestrate.gen/#0"  # "cat" now comes second


def test_a_call_inserted_before_gets_a_new_name_and_the_old_ones_follow() -> None:
    inserted = V1.replace('    a = await gen("cat")', '    h = await gen("hero")\n'
                                                       '    a = await gen("cat")')
    result = gate(committed(V1), inserted)
    assert result.accepted
    storage = result.storage
    assert storage["orchestrate/#1>orchestrate.gen/#0"] == "orchestrate/#0>orchestrate.gen/#0"
    assert storage["orchestrate/#2>orchestrate.gen/#0"] == "orchestrate/#1>orchestrate.gen/#0"
    hero = storage["orchestrate/#0>orchestrate.gen/#0"]
    assert hero.startswith("orchestrate/#0>orchestrate.gen/#0~")  # never a frozen name


def test_wrapping_a_committed_call_in_try_relocates() -> None:
    source = 'async def orchestrate(ctx, args):\n    return await ctx.run("text.generate", ' \
             '{"prompt": "x"})\n'
    wrapped = ('async def orchestrate(ctx, args):\n    try:\n        return await ctx.run('
               '"text.generate", {"prompt": "x"})\n    except CapabilityError:\n'
               '        return None\n')
    result = gate(committed(source), wrapped)
    assert result.accepted
    assert [(r.frozen, r.site) for r in result.relocations] == [
        ("orchestrate/#0", "orchestrate/try0/#0")]
    strict = gate(committed(source), wrapped, relocation="stop")
    assert [c.kind for c in strict.counterexamples] == ["removed"]


def test_two_new_sites_matching_one_frozen_site_stop_and_name_every_candidate() -> None:
    source = 'async def orchestrate(ctx, args):\n    return await ctx.run("text.generate", ' \
             '{"prompt": "x"})\n'
    doubled = ('async def orchestrate(ctx, args):\n    if args:\n        return await ctx.run('
               '"text.generate", {"prompt": "x"})\n    else:\n        return await ctx.run('
               '"text.generate", {"prompt": "x"})\n')
    result = gate(committed(source), doubled)
    assert not result.accepted
    [problem] = result.counterexamples
    assert problem.kind == "ambiguous"
    assert problem.candidates == ("orchestrate/else0/#0", "orchestrate/if0/#0")
    assert "could be any of" in problem.describe()


def test_a_helper_called_from_two_places_cannot_cover_one_frozen_site() -> None:
    source = 'async def orchestrate(ctx, args):\n    return await ctx.run("image.generate", ' \
             '{"prompt": s})\n'.replace("s}", "args[0]}")
    helper = '''async def orchestrate(ctx, args):
    async def gen(x):
        return await ctx.run("image.generate", {"prompt": args[0]})
    a = await gen(1)
    b = await gen(2)
    return [a, b]
'''
    result = gate(committed(source), helper)
    assert [c.kind for c in result.counterexamples] == ["ambiguous"]


def test_a_moved_call_whose_expression_changed_is_not_relocated() -> None:
    source = 'async def orchestrate(ctx, args):\n    return await ctx.run("text.generate", ' \
             '{"prompt": "x"})\n'
    moved = ('async def say(ctx):\n    return await ctx.run("text.generate", {"prompt": "y"})'
             '\n\nasync def orchestrate(ctx, args):\n    return await say(ctx)\n')
    assert [c.kind for c in gate(committed(source), moved).counterexamples] == ["removed"]


def test_a_counterexample_names_the_committed_line() -> None:
    frozen = committed(V1)
    result = gate(frozen, V1.replace('{"prompt": s}', '{"prompt": s.upper()}'))
    assert {c.committed_line for c in result.counterexamples} == {3}
    assert "committed at line 3" in result.counterexamples[0].describe()


RACE_V1 = '''async def orchestrate(ctx, args):
    async def attempt(size):
        return await ctx.run("image.generate", {"prompt": "a lighthouse", "size": size})
    art = await ctx.race([attempt(s) for s in ["512x512", "256x256"]])
    return art
'''


def test_a_race_moved_into_a_helper_with_a_branch_added_relocates() -> None:
    """A race is frozen by its winner (checked when it runs), not by its branch list: moved
    and given a branch, it is the same race (each change alone was accepted; both together
    were refused as 'removed', naming the one race that could be it)."""
    moved = RACE_V1.replace(
        '    art = await ctx.race([attempt(s) for s in ["512x512", "256x256"]])',
        '    async def hero():\n'
        '        return await ctx.race([attempt(s) for s in ["512x512", "256x256", "1x1"]])\n'
        '    art = await hero()')
    result = gate(committed(RACE_V1), moved)
    assert result.accepted, result.counterexamples
    assert ("orchestrate/#0", "orchestrate/#0>orchestrate.hero/#0") in {
        (r.frozen, r.site) for r in result.relocations}
    two = moved.replace("    art = await hero()", "    art = await hero()\n"
                        "    art = await ctx.race([attempt(s) for s in ['9x9']])")
    assert [c.kind for c in gate(committed(RACE_V1), two).counterexamples] == ["ambiguous"]
    gone = RACE_V1.replace('ctx.race([attempt(s) for s in ["512x512", "256x256"]])',
                           'attempt("512x512")')
    [removed] = [c for c in gate(committed(RACE_V1), gone).counterexamples
                 if c.expected_capability == "ctx.race"]
    assert removed.kind == "removed" and "keep one ctx.race there" in removed.describe()

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

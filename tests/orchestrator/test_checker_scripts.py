"""Whole scripts: legitimate workflows (including the paper's Fig. 1), hostile scripts,
hostile input sizes and shapes, and the promise that the checker never runs the source."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.checker import CheckReport, check

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "checker"
HEAD = "async def orchestrate(ctx, args):\n"


def fixture(kind: str, name: str) -> str:
    return (FIXTURES / kind / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "valid").iterdir()))
def test_legitimate_scripts_are_accepted(name: str) -> None:
    report = check(fixture("valid", name))
    assert report.valid, report.to_json()
    assert report.facts["capability_calls"] >= 1


def test_fig1_original_and_repair_have_the_same_capability_facts() -> None:
    original = check(fixture("valid", "fig1_original.py.txt"))
    repair = check(fixture("valid", "fig1_repair.py.txt"))
    assert original.valid and repair.valid
    assert original.facts["capabilities"] == repair.facts["capabilities"] == ["image.generate"]
    assert original.facts["capability_calls"] == repair.facts["capability_calls"] == 1
    assert repair.facts["functions"] == ["gen_one", "orchestrate"]


def test_indirect_fanout_through_a_list_variable_is_caught() -> None:
    report = check(fixture("invalid", "indirect_fanout.py.txt"))
    assert ("R05", 9) in {(v.rule, v.line) for v in report.violations}


def test_hostile_script_reports_every_trick() -> None:
    report = check(fixture("invalid", "hostile.py.txt"))
    found = {(v.rule, v.line) for v in report.violations}
    assert {("R10", 1), ("R06", 4), ("R06", 5), ("R02", 6), ("R10", 7), ("R10", 8),
            ("R10", 10), ("R10", 11), ("R07", 12), ("R03", 13)} <= found


@pytest.mark.parametrize(("source", "rule"), [
    (HEAD + "    return \uff45\uff56\uff41\uff4c('1')\n", "R07"),           # fullwidth eval
    (HEAD + "    return __\uff49\uff4d\uff50\uff4f\uff52\uff54__('os')\n", "R10"),
    (HEAD + "    return _\uff53\uff49\uff54\uff45\n", "R10"),  # fullwidth _site name
    (HEAD + "    return {'\uff3fsite': 1}\n", "R10"),                 # fullwidth in data
    (HEAD + "    return {'_s\u0456te': 1}['x']\n", None),             # Cyrillic i: not NFKC
    (HEAD + "    return args.__\uff43lass__\n", "R06"),
    (HEAD + "    return await ctx.run('\uff49mage.generate', {})\n", "R08"),
])
def test_unicode_lookalikes_are_normalised(source: str, rule: str | None) -> None:
    report = check(source)
    if rule is None:
        assert report.valid, report.to_json()
    else:
        assert rule in {v.rule for v in report.violations}, report.to_json()


def test_lookalike_capability_message_says_so() -> None:
    report = check(HEAD + "    return await ctx.run('\uff49mage.generate', {})\n")
    assert any("look-alike" in v.message for v in report.violations)


# ---- hostile sizes and shapes --------------------------------------------------------------

DEEP = [
    "x = " + "(" * 5000 + "1" + ")" * 5000,
    "x = " + "[" * 300 + "]" * 300,
    "x = " + "a+" * 100_000 + "a",
    "x = " + "-" * 100_000 + "1",
    "x = " + "not " * 50_000 + "a",
    "x = a" + ".b" * 100_000,
    "x = a" + "[0]" * 60_000,
    "x = a" + "()" * 60_000,
    "x = " + "lambda: " * 10_000 + "1",
    "".join(" " * i + "if a:\n" for i in range(150)) + " " * 150 + "pass",
    "x = 1" + "0" * 5000,
    "x = " + "1 if a else " * 5000 + "1",
    "x = " + "f'{" * 50 + "1" + "}'" * 50,
]


@pytest.mark.parametrize("body", DEEP, ids=[f"deep-{i}" for i in range(len(DEEP))])
def test_deep_or_huge_input_is_r00_not_a_crash(body: str) -> None:
    report = check(body + "\n" + HEAD + "    return 1\n")
    assert isinstance(report, CheckReport)
    assert not report.valid
    assert "R00" in {v.rule for v in report.violations}, report.to_json()


def test_oversized_source_is_r00() -> None:
    report = check("# " + "x" * (300 * 1024) + "\n" + HEAD + "    return 1\n")
    assert [v.rule for v in report.violations] == ["R00"]


def test_long_string_literal_is_r00() -> None:
    report = check(HEAD + "    return '" + "x" * 40_000 + "'\n")
    assert ("R00", 2) in {(v.rule, v.line) for v in report.violations}


@pytest.mark.parametrize("source", ["\x00", "a\rb", "", "   ", "\ufeff", "\ud800",
                                    "# -*- coding: latin-1 -*-\n"])
def test_odd_text_never_raises(source: str) -> None:
    report = check(source)
    assert isinstance(report, CheckReport) and not report.valid


@pytest.mark.parametrize("value", [None, 42, b"\xff\xfe", ["x"]])
def test_non_text_input_never_raises(value: object) -> None:
    report = check(value)  # type: ignore[arg-type]
    assert not report.valid and report.violations[0].rule == "R00"


def test_big_flat_script_is_checked_quickly() -> None:
    import time

    lines = [f"    v{i} = [x for x in args['a'][:3]] + [{i}]" for i in range(2000)]
    source = HEAD + "\n".join(lines) + "\n    return 1\n"
    start = time.perf_counter()
    report = check(source)
    assert report.valid, report.to_json()["violations"][:3]
    assert time.perf_counter() - start < 20


# ---- the checker never executes the source -------------------------------------------------

def test_checker_never_executes_the_source(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    effect = f"open({str(marker)!r}, 'w').write('ran')"
    source = (f"{effect}\nraise SystemExit(3)\n" + HEAD + f"    {effect}\n"
              "    while True:\n        pass\n")
    report = check(source)
    assert not report.valid
    assert not marker.exists()
    # and a perfectly valid script is not run either: its top level is only constants
    ok = check(HEAD + f"    return {str(marker)!r}\n")
    assert ok.valid and not marker.exists()


@pytest.mark.parametrize("walk", [
    "g = (x for x in [1])\n    return g.gi_frame.f_back.f_globals",
    "c = ctx.run('text.generate', {'prompt': 'x'})\n    return [c][0].cr_frame",
    "g = (x for x in [1])\n    f = g.gi_frame\n    return f.f_builtins",
    "async def h():\n        return 1\n    return h().cr_code.co_consts",
])
def test_frame_and_code_walks_are_rejected(walk: str) -> None:
    report = check("async def orchestrate(ctx, args):\n    " + walk + "\n")
    assert not report.valid
    assert "R06" in {v.rule for v in report.violations}


# ---- the scripts the project ships stay valid ------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*(ROOT / "tests" / "fixtures" / "scripts").glob("*.py"),
                  *(ROOT / "orchestrator" / "demo").glob("*.script")])


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_scripts_stay_valid(path: Path) -> None:
    report = check(path.read_text(encoding="utf-8"))
    assert report.valid, report.to_json()


def test_shipped_scripts_are_found() -> None:
    assert len(SHIPPED) >= 20


# ---- one builtins table for the checker and the sandbox ---------------------------------------

def test_builtins_tables_come_from_the_language_table() -> None:
    from orchestrator.checker import builtins as table
    from sandbox import language

    assert table.ALLOWED_BUILTINS == language.BUILTIN_NAMES
    assert table.CATCHABLE_ERRORS == frozenset(language.CATCHABLE_ERRORS)
    assert set(table.CTX_METHODS) == set(language.CTX_METHODS)
    assert table.DATA_METHODS == language.DATA_METHODS
    assert table.ERROR_FIELDS == language.ERROR_FIELDS


def _accepts_free_name(name: str) -> bool:
    return check(HEAD + f"    value = {name}\n    return 1\n").valid


def test_free_names_the_checker_accepts_are_exactly_the_language_builtins() -> None:
    import builtins

    from orchestrator.checker.builtins import DENIED_BUILTIN_REASONS, NONDETERMINISTIC_NAMES
    from sandbox import language

    candidates = (set(dir(builtins)) | set(language.BUILTIN_NAMES)
                  | set(DENIED_BUILTIN_REASONS) | set(NONDETERMINISTIC_NAMES)
                  | {"CapabilityError", "ScriptStopped", "asyncio", "ctx_", "loop"})
    accepted = {name for name in candidates if _accepts_free_name(name)}
    assert accepted == set(language.BUILTIN_NAMES)


def test_repr_is_refused_with_a_hint() -> None:
    report = check(HEAD + "    return repr(args)\n")
    (violation,) = report.violations
    assert violation.rule == "R07" and "str()" in violation.message


# ---- the quick prescan never disagrees with the token scan -----------------------------------

_PRESCAN_SAMPLES = [
    *DEEP,
    "x = '" + "(" * 50 + "'\n",
    "# " + "(" * 50 + "\n",
    '"""\n' + "((((" * 20 + '\n"""\n',
    "x = '" + "-" * 60 + "'\n",
    "x = " + "- " * 30 + "not " * 20 + "1\n",
    "x = a" + " ** b" * 30 + "\n",
    "x = " + "(" * 41 + "1" + ")" * 41 + "\n",
    "x = " + "(" * 40 + "1" + ")" * 40 + "\n",
    "x = (\n" + "  [\n" * 45 + "  ]\n" * 45 + ")\n",
    "x = 1 \\\n" + " - \\\n" * 45 + " 1\n",
    "".join(" " * i + "if a:\n" for i in range(30)) + " " * 30 + "pass\n",
    "".join("\t" * i + "if a:\n" for i in range(26)) + "\t" * 26 + "pass\n",
]


@pytest.mark.parametrize("text", _PRESCAN_SAMPLES, ids=range(len(_PRESCAN_SAMPLES)))
def test_quick_prescan_is_an_over_estimate(text: str) -> None:
    from orchestrator.checker import limits

    exact = limits.token_scan(text)
    assert limits.prescan(text) == exact
    if limits._surely_shallow(text):
        assert exact is None


def test_rules_doc_lists_the_language_table() -> None:
    """docs/rules.md is what a model reads: it must name every allowed builtin, data method
    and error field, and not offer repr."""
    from sandbox import language

    doc = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    section = doc[doc.index("## What a script may name"):doc.index("## Decisions")]
    names = (set(language.BUILTIN_NAMES) | language.DATA_METHODS | language.ERROR_FIELDS)
    missing = sorted(name for name in names if f"`{name}`" not in section)
    assert missing == []
    assert "`repr`" not in section

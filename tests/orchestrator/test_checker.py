"""Per-rule tables: each rule rejects its construct (rule id and line) and accepts the
legitimate neighbour a too-strict checker would refuse."""

from __future__ import annotations

import json
import textwrap

import pytest

from orchestrator.checker import RULE_IDS, CheckReport, Violation, check

HEAD = "async def orchestrate(ctx, args):\n"


def script(body: str, *, before: str = "") -> str:
    """``before`` at top level, then ``body`` indented inside orchestrate (body line 1 is
    file line 2 when ``before`` is empty)."""
    return textwrap.dedent(before) + HEAD + textwrap.indent(textwrap.dedent(body), "    ")


def rules_at(report: CheckReport) -> set[tuple[str, int]]:
    return {(v.rule, v.line) for v in report.violations}


# (rule, line, source) -- each must be rejected with that rule at that line.
REJECT = [
    ("R00", 2, script("return (\n")),
    ("R00", 2, script("return " + "(" * 60 + "1" + ")" * 60 + "\n")),
    ("R00", 1, "X = 10 ** 100000\n" + HEAD + "    return X\n"),
    ("R00", 2, script('return "x" * 10 ** 9\n')),
    ("R00", 2, script("return [0] * (1 << 40)\n")),
    ("R00", 3, "N = 10 ** 9\n" + HEAD + '    return "ab" * N\n'),
    ("R00", 2, script("return " + "-" * 60 + "1\n")),
    ("R01", 1, "async def helper(ctx, args):\n    return 1\n"),
    ("R01", 1, "def orchestrate(ctx, args):\n    return 1\n"),
    ("R01", 1, "async def orchestrate(ctx):\n    return 1\n"),
    ("R01", 1, "async def orchestrate(ctx, args, *rest):\n    return 1\n"),
    ("R01", 3, HEAD + "    return 1\nasync def orchestrate(ctx, args):\n    return 2\n"),
    ("R01", 1, 'print("hello")\n' + HEAD + "    return 1\n"),
    ("R01", 1, "X = len([1])\n" + HEAD + "    return X\n"),
    ("R01", 1, "for i in range(3):\n    pass\n" + HEAD + "    return 1\n"),
    ("R02", 2, script('return await ctx.call("image.generate", {})\n')),
    ("R02", 2, script("return await ctx.gather([])\n")),
    ("R02", 2, script("f = ctx.run\nreturn await f('image.generate', {})\n")),
    ("R02", 2, script('ctx.run("image.generate", {"prompt": "x"})\n')),
    ("R02", 2, script("x = ctx\nreturn 1\n")),
    ("R02", 2, script("print(ctx)\n")),
    ("R02", 2, script("ctx = 3\nreturn ctx\n")),
    ("R02", 2, script('await ctx.log("x")\n')),
    ("R02", 2, script("return await ctx.parallel()\n")),
    ("R02", 2, script("return await ctx.parallel(*[[]])\n")),
    ("R02", 4, script("return await h(ctx)\n", before="async def h(*cs):\n    return 1\n")),
    ("R03", 2, script("while True:\n    pass\n")),
    ("R03", 2, script('for s in args["shots"]:\n    pass\n')),
    ("R03", 2, script('return [s for s in args["shots"]]\n')),
    ("R03", 2, script('for i in range(len(args["x"])):\n    pass\n')),
    ("R03", 2, script("for i in range(100_000):\n    pass\n")),
    ("R03", 2, script('for s in args["x"][:-1]:\n    pass\n')),
    ("R03", 3, script("a = [1]\nfor x in a:\n    a.append(x)\n")),
    ("R03", 4, script("a = [1]\nb = a\nfor x in b:\n    a.append(x)\n")),
    ("R03", 3, script('r = await ctx.run("text.generate", {"prompt": "p"})\n'
                      'for w in r["words"]:\n    pass\n')),
    ("R03", 2, script("async for x in args:\n    pass\n")),
    ("R04", 2, script("return time.time()\n")),
    ("R04", 2, script("return random.random()\n")),
    ("R04", 2, script("return id(args)\n")),
    ("R04", 2, script("return args.now()\n")),
    ("R04", 3, script("s = {1, 2}\nreturn [x for x in s]\n")),
    ("R04", 2, script('for x in set(args["a"][:3]):\n    pass\n')),
    ("R04", 2, script('return list({"a", "b"})\n')),
    ("R04", 2, script('return ", ".join({"a", "b"})\n')),
    ("R05", 5, script('tasks = [g(s) for s in args["shots"]]\nreturn await ctx.parallel(tasks)\n',
                      before="async def g(s):\n    return s\n")),
    ("R05", 3, script('tasks = args["tasks"]\nreturn await ctx.parallel(tasks)\n')),
    ("R05", 2, script('return await ctx.race(args["tasks"])\n')),
    ("R05", 2, script('return await ctx.pipeline(args["stages"], 1)\n')),
    ("R05", 2, script('return await ctx.dag(args["graph"])\n')),
    ("R05", 2, script("return await ctx.parallel([1 for i in range(5000)])\n")),
    ("R06", 2, script("return args.__class__\n")),
    ("R06", 2, script("return args._secret\n")),
    ("R06", 2, script('return "{0.__class__}".format(args)\n')),
    ("R06", 2, script('return "{a}".format_map(args)\n')),
    ("R06", 2, script('return "%s" % args\n')),
    ("R06", 2, script('return getattr(args, "x")\n')),
    ("R06", 2, script("return __builtins__\n")),
    ("R06", 2, script("args.x = 1\n")),
    ("R06", 2, script("f = args.get\n")),
    ("R06", 2, script("return args.get_loop()\n")),
    ("R06", 2, script('return args["tmpl"] % args\n')),
    ("R07", 2, script('return eval("1")\n')),
    ("R07", 2, script('return open("/etc/passwd")\n')),
    ("R07", 2, script("return type(args)\n")),
    ("R07", 2, script("return secret_value\n")),
    ("R07", 2, script('raise Exception("x")\n')),
    ("R07", 2, script("return repr(args)\n")),
    ("R08", 2, script('return await ctx.run("image.gen", {})\n')),
    ("R08", 3, script('name = "image.generate"\nreturn await ctx.run(name, {})\n')),
    ("R08", 2, script('return await ctx.run(f"image.{args}", {})\n')),
    ("R09", 4, script("try:\n    return 1\nexcept:\n    return 2\n")),
    ("R09", 4, script("try:\n    return 1\nexcept Exception:\n    return 2\n")),
    ("R09", 4, script("try:\n    return 1\nexcept (KeyError, BaseException):\n    return 2\n")),
    ("R09", 2, script("try:\n    return 1\nexcept* ValueError:\n    return 2\n")),
    ("R09", 4, script("try:\n    return 1\nexcept OSError:\n    return 2\n")),
    ("R10", 1, "import os\n" + HEAD + "    return 1\n"),
    ("R10", 1, "from os import path\n" + HEAD + "    return 1\n"),
    ("R10", 2, script('return __import__("os")\n')),
    ("R10", 2, script('return await ctx.run("image.generate", {}, _site="x")\n')),
    ("R10", 2, script('return await ctx.run("image.generate", {"_site": "x"})\n')),
    ("R10", 2, script("_site = 1\nreturn _site\n")),
    ("R10", 2, script("return args._site\n")),
    ("R10", 2, script('return "_si" + "te"\n')),
    ("R10", 2, script("return f\"_{'site'}\"\n")),
    ("R10", 3, script('a = ["image.generate", {}]\nreturn await ctx.run(*a)\n')),
    ("R10", 2, script('return await ctx.run("image.generate", **{"payload": {}})\n')),
    ("R10", 2, script('return await ctx.run("image.generate", payload={})\n')),
    ("R10", 2, script('return await ctx.run("image.generate")\n')),
    ("R10", 2, script('return await ctx.run("image.generate", {}, take=0)\n')),
    ("R10", 2, script('return await ctx.run("image.generate", {}, take=args["n"])\n')),
    ("R11", 2, script("global X\n")),
    ("R11", 1, "class A:\n    pass\n" + HEAD + "    return 1\n"),
    ("R11", 2, script("f = lambda x: x\n")),
    ("R11", 2, script("yield 1\n")),
    ("R11", 2, script("with args as a:\n    pass\n")),
    ("R11", 2, script("match args:\n    case _:\n        pass\n")),
    ("R11", 2, script("assert args\n")),
    ("R11", 2, script("if (n := 1):\n    pass\n")),
    ("R11", 1, "@staticmethod\n" + HEAD + "    return 1\n"),
    ("R11", 5, script("try:\n    pass\nfinally:\n    return 1\n")),
    ("R11", 6, script("for i in range(2):\n    try:\n        pass\n    finally:\n        break\n")),
    ("R11", 5, script('CACHE["k"] = 1\n', before="CACHE = {}\n\n\n")),
    ("R11", 6, script("x = SEEN\nx.append(1)\n", before="SEEN = []\n\n\n")),
    ("R11", 2, "def h(ctx):\n    return await ctx.run('image.generate', {})\n" + HEAD
     + "    return h(ctx)\n"),
    ("R12", 2, "def f(n):\n    return f(n)\n" + HEAD + "    return f(1)\n"),
    ("R12", 2, "async def a(ctx):\n    return await b(ctx)\nasync def b(ctx):\n"
     "    return await a(ctx)\n" + HEAD + "    return await a(ctx)\n"),
    ("R12", 2, "def ap(f, x):\n    return f(x)\n" + HEAD + "    return ap(ap, 1)\n"),
    ("R12", 3, script("async def stage(x):\n    return await ctx.pipeline([stage], x)\n"
                      "return await ctx.pipeline([stage], 1)\n")),
]


@pytest.mark.parametrize(("rule", "line", "source"), REJECT,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(REJECT)])
def test_rule_rejects(rule: str, line: int, source: str) -> None:
    report = check(source)
    assert not report.valid
    assert (rule, line) in rules_at(report), report.to_json()
    violation = next(v for v in report.violations if (v.rule, v.line) == (rule, line))
    assert violation.message and violation.hint


# Legitimate neighbours of the rejected constructs, one or more per rule.
ACCEPT = {
    "R00-small-constants": "X = 2 ** 20\nY = 'ab' * 100\n" + HEAD + "    return [X, Y]\n",
    "R01-docstring-constants-helpers": '"""Doc."""\nN = 4\nNAMES = ["a", "b"]\nT: int = N * 2\n'
    "def pure(x):\n    return x\n" + HEAD + "    return pure(N + T)\n",
    "R02-all-methods": script(
        """\
        async def one(x):
            return await ctx.run("text.generate", {"prompt": x})
        async def two():
            return 2
        ctx.log("start")
        a = await ctx.parallel([one("a"), one("b")])
        b = await ctx.race([one("c"), one("d")])
        c = await ctx.pipeline([one], "seed")
        d = await ctx.dag({"x": (two, []), "y": (two, ["x"])})
        return [a, b, c, d]
        """),
    "R02-ctx-passed-to-helper": "async def h(ctx, x):\n"
    "    return await ctx.run('text.generate', {'prompt': x})\n"
    + HEAD + "    return await h(ctx, 'x')\n",
    "R02-helper-other-param-name": "async def h(c, x):\n"
    "    return await c.run('text.generate', {'prompt': x})\n"
    + HEAD + "    return await h(c=ctx, x='x') if args else await h(ctx, 'y')\n",
    "R02-run-element-of-fanout": script(
        'return await ctx.parallel([ctx.run("text.generate", {"prompt": p})'
        ' for p in args["p"][:3]])\n'),
    "R03-bounded-forms": script(
        """\
        total = 0
        for i in range(3):
            for j in range(i):
                total += j
        for i, s in enumerate(args["shots"][:6]):
            total += i
        for x in ["a", "b"]:
            total += len(x)
        for a, b in zip(args["a"][:3], args["b"]):
            total += 1
        for s in reversed(sorted(args["x"][2:5])):
            total += 1
        for s in args["x"][-3:]:
            total += 1
        n = min(len(args["x"]), 5)
        for s in args["x"][:n]:
            total += 1
        for k in range(0, 10, 2):
            total += k
        return [c for c in "abc"] + [total]
        """),
    "R03-items-of-built-dict": script(
        """\
        counts = {}
        for s in args["x"][:5]:
            counts[s] = counts.get(s, 0) + 1
        return [k for k, v in counts.items() if v > 1]
        """),
    "R03-loop-over-fanout-result": "async def g(ctx, s):\n"
    "    return await ctx.run('text.generate', {'prompt': s})\n" + script(
        """\
        results = await ctx.parallel([g(ctx, s) for s in args["s"][:4]])
        for r in results:
            ctx.log(r)
        return any(r is None for r in results)
        """),
    "R03-helper-param-bounded-by-callers": "def count(items):\n"
    "    return sum(1 for _ in items)\n" + HEAD
    + "    return count(args['x'][:3]) + count([1, 2])\n",
    "R04-sorted-set": script('s = set(args["x"][:4])\nreturn [x for x in sorted(s)] + '
                             '[len(s), "a" in s]\n'),
    "R05-bounded-list-variable": "async def g(ctx, s):\n"
    "    return await ctx.run('text.generate', {'prompt': s})\n" + script(
        """\
        tasks = []
        for s in args["shots"][:4]:
            tasks.append(g(ctx, s))
        more = [g(ctx, s) for s in ["x", "y"]]
        a = await ctx.parallel(tasks)
        b = await ctx.parallel(more + tasks)
        return [a, b]
        """),
    "R06-fstrings-and-single-underscore": script(
        'for _ in range(2):\n    pass\nreturn f"{args!r} {len(args):>4}"\n'),
    "R07-allowed-builtins": script(
        'return [len("a"), abs(-1), round(1.5), str(1), int("1"), float(1), bool(0),'
        ' dict(a=1), tuple([1]), any([]), all([]), isinstance(1, int), divmod(5, 2),'
        ' chr(65), ord("a"), max(1, 2), min(1, 2), sum([1]), len(set([1])),'
        ' len(frozenset([1])), list(reversed([1])), list(zip([1], [2]))]\n'),
    "R08-granted-capabilities": script(
        'a = await ctx.run("image.generate", {"prompt": "x"})\n'
        'b = await ctx.run("review.visual", {"image": a})\nreturn b\n'),
    "R09-catch-by-name": script(
        """\
        try:
            r = await ctx.run("text.generate", {"prompt": "x"})
        except CapabilityError as e:
            r = str(e)
        except (KeyError, IndexError, ValueError):
            r = None
        return r
        """),
    "R06-data-methods-error-fields-and-remainders": script(
        """\
        parts = [p.strip().lower() for p in args["parts"][:4]]
        odd = [i for i in range(8) if i % 2]
        try:
            r = await ctx.run("text.generate", {"prompt": ", ".join(parts)})
        except CapabilityError as e:
            r = {"error": e.message, "code": e.code}
        return [r.get("text", ""), odd, SIZES[1] % 3]
        """, before="SIZES = [256, 512]\n\n\n"),
    "R10-take": script('return await ctx.run("image.generate", {"prompt": "x"}, take=2)\n'),
    "R11-finally-and-copied-constants": script(
        """\
        sizes = list(SIZES)
        sizes.append(1024)
        try:
            r = await ctx.run("text.generate", {"prompt": "x"})
        finally:
            ctx.log("done")
        return [sizes, r]
        """, before="SIZES = [256, 512]\n\n\n"),
    "R10-strings-mentioning-site": script('return {"site": "_site_map", "x": "my _site"}\n'),
    "R11-del-and-raise": script('d = {"a": 1}\ndel d["a"]\nif not d:\n'
                                '    raise RuntimeError("empty")\nreturn d\n'),
    "R12-helpers-calling-helpers": "def a(x):\n    return x + 1\n"
    "def b(x):\n    return a(x) * 2\n" + HEAD + "    return b(a(1))\n",
}


@pytest.mark.parametrize("source", list(ACCEPT.values()), ids=list(ACCEPT))
def test_rule_accepts(source: str) -> None:
    report = check(source)
    assert report.valid, report.to_json()
    assert report.violations == ()


def test_every_rule_has_a_rejecting_case() -> None:
    assert {rule for rule, _, _ in REJECT} == set(RULE_IDS)


def test_report_json_shape_and_facts() -> None:
    source = script('a = await ctx.run("image.generate", {"prompt": "x"})\n'
                    'b = await ctx.run("text.generate", {"prompt": "y"})\n'
                    'return await helper(ctx)\n',
                    before="async def helper(ctx):\n"
                           "    return await ctx.run('text.generate', {'prompt': 'z'})\n")
    report = check(source)
    data = report.to_json()
    assert json.loads(json.dumps(data)) == data
    assert data["valid"] is True and data["violations"] == []
    assert data["facts"] == {"capability_calls": 3,
                             "capabilities": ["image.generate", "text.generate"],
                             "functions": ["helper", "orchestrate"]}


def test_violation_json_and_order() -> None:
    source = "import os\n" + HEAD + "    while True:\n        x = eval('1')\n"
    report = check(source)
    lines = [(v.line, v.rule) for v in report.violations]
    assert lines == sorted(lines)
    assert report.violations[0].to_json() == {
        "rule": "R10", "line": 1, "message": report.violations[0].message,
        "hint": report.violations[0].hint, "severity": "error"}


def test_warning_severity_keeps_report_valid() -> None:
    warning = Violation("R04", 3, "m", "h", severity="warning")
    assert CheckReport.from_violations([warning]).valid
    assert not CheckReport.from_violations([warning, Violation("R03", 1, "m", "h")]).valid


def test_violation_rejects_unknown_rule() -> None:
    with pytest.raises(ValueError):
        Violation("R99", 1, "m", "h")


def test_unknown_method_hints_the_replacement() -> None:
    hints = {v.hint for v in check(script('return await ctx.invoke("x", {})\n')).violations}
    assert any("ctx.run" in h for h in hints)
    hints = {v.hint for v in check(script("return await ctx.spawn([])\n")).violations}
    assert any("ctx.parallel" in h for h in hints)


def test_capability_outside_the_grant_is_rejected() -> None:
    source = script('return await ctx.run("image.generate", {"prompt": "x"})\n')
    assert check(source).valid
    report = check(source, capabilities=frozenset({"text.generate"}))
    assert rules_at(report) == {("R08", 2)}
    assert "text.generate" in report.violations[0].hint


def test_unknown_capability_hint_lists_catalog() -> None:
    report = check(script('return await ctx.run("image.gen", {})\n'))
    (violation,) = report.violations
    assert "image.generate" in violation.hint and "text.generate" in violation.hint


def test_check_is_deterministic() -> None:
    source = (HEAD + "    import os\n    while x:\n        y = {1, 2}\n"
              "    return [a for a in y] + eval('1')\n")
    first = check(source).to_json()
    assert all(check(source).to_json() == first for _ in range(5))

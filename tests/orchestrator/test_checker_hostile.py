"""The hostile corpus: small complete scripts that tried to reach the host through the
checker (coroutine and generator methods, the event loop, Future/Task methods, exception
introspection, string formatting, look-alike spellings, attribute stores, ``finally``
exits, module state, reflection), and the legitimate neighbours that must stay valid."""

from __future__ import annotations

import textwrap

import pytest

from orchestrator.checker import check

_HELPER = "async def helper():\n    return 1\n\n\n"


def _script(body: str, *, before: str = "") -> str:
    return (textwrap.dedent(before) + "async def orchestrate(ctx, args):\n"
            + textwrap.indent(textwrap.dedent(body), "    "))


def _with_helper(body: str) -> str:
    return _script(body, before=_HELPER)


# name -> (source, the rule that must fire)
HOSTILE: dict[str, tuple[str, str]] = {
    # ---- coroutine and generator methods ---------------------------------------------
    "coro-send": (_with_helper("fut = helper().send(None)\nreturn 1\n"), "R06"),
    "coro-throw": (_with_helper('c = helper()\nc.throw(ValueError("x"))\nreturn 1\n'), "R06"),
    "coro-close": (_with_helper("c = helper()\nc.close()\nreturn 1\n"), "R06"),
    "coro-cr-frame": (_with_helper("return helper().cr_frame.f_back.f_globals\n"), "R06"),
    "coro-cr-await": (_with_helper("c = helper()\nreturn c.cr_await\n"), "R06"),
    "coro-cr-code": (_with_helper("return helper().cr_code.co_consts\n"), "R06"),
    "coro-cr-running": (_with_helper("return helper().cr_running\n"), "R06"),
    "gen-gi-frame": (_script("g = (x for x in [1])\nreturn g.gi_frame\n"), "R06"),
    "gen-send": (_script("g = (x for x in [1])\nreturn g.send(None)\n"), "R06"),
    "gen-gi-yieldfrom": (_script("g = (x for x in [1])\nreturn g.gi_yieldfrom\n"), "R06"),
    # ---- the event loop ----------------------------------------------------------------
    "future-get-loop": (_with_helper("fut = helper().send(None)\nloop = fut.get_loop()\n"
                                     "return 1\n"), "R06"),
    "loop-subprocess-shell": (_with_helper(
        "loop = helper().send(None).get_loop()\n"
        'await loop.subprocess_shell(print, "id")\nreturn 1\n'), "R06"),
    "loop-create-connection": (_with_helper(
        "loop = helper().send(None).get_loop()\n"
        'await loop.create_connection(print, "10.0.0.1", 80)\nreturn 1\n'), "R06"),
    "loop-run-in-executor": (_with_helper(
        "loop = helper().send(None).get_loop()\n"
        "await loop.run_in_executor(None, print, 1)\nreturn 1\n"), "R06"),
    "task-get-stack": (_with_helper(
        "loop = helper().send(None).get_loop()\n"
        "return loop.create_task(helper()).get_stack()\n"), "R06"),
    "future-done-callback": (_with_helper(
        "helper().send(None).add_done_callback(print)\nreturn 1\n"), "R06"),
    "future-set-result": (_with_helper("helper().send(None).set_result(1)\nreturn 1\n"),
                          "R06"),
    "future-cancel": (_with_helper("return helper().send(None).cancel()\n"), "R06"),
    # ---- exception introspection -------------------------------------------------------
    "exc-traceback": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    return e.__traceback__.tb_frame\n"), "R06"),
    "exc-with-traceback": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    return e.with_traceback(None)\n"), "R06"),
    "exc-args": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    return e.args\n"), "R06"),
    "exc-context": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except KeyError as e:\n    return e.__context__\n"), "R06"),
    "exc-field-called": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    return e.message()\n"), "R06"),
    # ---- string formatting -------------------------------------------------------------
    "percent-args-template": (_script('return args["tmpl"] % args\n'), "R06"),
    "percent-literal": (_script('return "%s" % args\n'), "R06"),
    "percent-local-name": (_script('t = "%(a)s"\nreturn t % args\n'), "R06"),
    "percent-fstring": (_script('return f"{args}%s" % (1,)\n'), "R06"),
    "percent-max-of-strings": (_script('return max(args["a"], "%s") % args\n'), "R06"),
    "percent-param": (_script("return fmt(args)\n",
                              before="def fmt(t):\n    return t % 1\n\n\n"), "R06"),
    "percent-through-a-cycle": (_script(
        'a = 1\nb = a * 2\na = b\na = args["s"]\nreturn b % args\n'), "R06"),
    "format-method": (_script('return "{0.__class__}".format(args)\n'), "R06"),
    "format-map": (_script('return "{a}".format_map(args)\n'), "R06"),
    "str-format-unbound": (_script('return str.format("{0}", args)\n'), "R06"),
    # ---- look-alike spellings (NFKC) ----------------------------------------------------
    "fullwidth-send": (_with_helper("return helper().\uff53\uff45\uff4e\uff44(None)\n"),
                       "R06"),
    "fullwidth-get-loop": (_with_helper(
        "return helper().send(None).\uff47\uff45\uff54\uff3f\uff4c\uff4f\uff4f\uff50()\n"),
        "R06"),
    "fullwidth-dunder": (_script("return args.__\uff43\uff4c\uff41\uff53\uff53__\n"), "R06"),
    "fullwidth-format": (_script('return "{0}".\uff46\uff4f\uff52\uff4d\uff41\uff54(args)\n'),
                         "R06"),
    "fullwidth-data-method-uncalled": (_script("f = args.\uff47\uff45\uff54\nreturn 1\n"),
                                       "R06"),
    # ---- attribute store, delete and aliasing -------------------------------------------
    "attribute-store": (_script("args.x = 1\nreturn 1\n"), "R06"),
    "attribute-store-on-error": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        'except CapabilityError as e:\n    e.message = "ok"\n'), "R06"),
    "attribute-augassign": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    e.code += 1\n"), "R06"),
    "attribute-delete": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n    del e.message\n"), "R06"),
    "data-method-uncalled": (_script('f = "".join\nreturn 1\n'), "R06"),
    "unlisted-dict-method": (_script("return dict.fromkeys([1])\n"), "R06"),
    "unlisted-public-name": (_script("return args.whatever\n"), "R06"),
    "ctx-method-store": (_script("ctx.run = None\nreturn 1\n"), "R06"),
    # ---- finally exits ------------------------------------------------------------------
    "finally-return": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\nfinally:\n    return 1\n'),
        "R11"),
    "finally-break": (_script(
        "for i in range(3):\n    try:\n"
        '        await ctx.run("text.generate", {"prompt": "x"})\n'
        "    finally:\n        break\nreturn 1\n"), "R11"),
    "finally-continue": (_script(
        "for i in range(3):\n    try:\n"
        '        await ctx.run("text.generate", {"prompt": "x"})\n'
        "    finally:\n        continue\nreturn 1\n"), "R11"),
    "finally-nested-return": (_script(
        'try:\n    await ctx.run("text.generate", {"prompt": "x"})\nfinally:\n'
        "    if args:\n        for i in range(2):\n            return i\n"), "R11"),
    "finally-break-from-loop-else": (_script(
        "for i in range(3):\n    try:\n        pass\n    finally:\n"
        "        for j in range(2):\n            pass\n        else:\n            break\n"
        "return 1\n"), "R11"),
    # ---- module-level state -------------------------------------------------------------
    "module-dict-subscript-store": (_script('CACHE["k"] = 1\nreturn CACHE\n',
                                           before="CACHE = {}\n\n\n"), "R11"),
    "module-dict-in-helper": (_script('return remember("a")\n', before=(
        "CACHE = {}\n\n\ndef remember(k):\n    CACHE[k] = 1\n    return CACHE\n\n\n")), "R11"),
    "module-list-append": (_script("SEEN.append(1)\nreturn SEEN\n",
                                   before="SEEN = []\n\n\n"), "R11"),
    "module-alias-mutated": (_script('x = CACHE\nx["k"] = 1\nreturn 1\n',
                                     before="CACHE = {}\n\n\n"), "R11"),
    "module-alias-chain": (_script("x = SEEN\ny = x\ny.extend([1])\nreturn 1\n",
                                   before="SEEN = []\n\n\n"), "R11"),
    "module-subscript-augassign": (_script('COUNTS["n"] += 1\nreturn 1\n',
                                           before='COUNTS = {"n": 0}\n\n\n'), "R11"),
    "module-name-augassign": (_script("SEEN += [1]\nreturn 1\n",
                                      before="SEEN = []\n\n\n"), "R11"),
    "module-alias-augassign": (_script("x = SEEN\nx += [1]\nreturn 1\n",
                                       before="SEEN = []\n\n\n"), "R11"),
    "module-delete": (_script('del CACHE["k"]\nreturn 1\n',
                              before='CACHE = {"k": 1}\n\n\n'), "R11"),
    "module-nested-append": (_script('CONFIG["sizes"].append(1)\nreturn 1\n',
                                     before='CONFIG = {"sizes": [1]}\n\n\n'), "R11"),
    "module-loop-var-mutated": (_script('for row in ROWS:\n    row["seen"] = True\nreturn 1\n',
                                        before='ROWS = [{"a": 1}]\n\n\n'), "R11"),
    "module-passed-to-mutating-helper": (_script("fill(SEEN)\nreturn SEEN\n", before=(
        "SEEN = []\n\n\ndef fill(acc):\n    acc.append(1)\n    return acc\n\n\n")), "R11"),
    "module-setdefault": (_script('CACHE.setdefault("k", []).append(1)\nreturn 1\n',
                                  before="CACHE = {}\n\n\n"), "R11"),
    "module-clear-sort-pop": (_script("SEEN.sort()\nSEEN.pop()\nSEEN.clear()\nreturn 1\n",
                                      before="SEEN = [2, 1]\n\n\n"), "R11"),
    "module-into-pipeline-stage": (_script("return await ctx.pipeline([stage], SEEN)\n", before=(
        "SEEN = []\n\n\nasync def stage(acc):\n    acc.append(1)\n    return acc\n\n\n")),
        "R11"),
    "module-through-dag-results": (_script(
        'return await ctx.dag({"a": (give, []), "b": (take, ["a"])})\n', before=(
            "SEEN = []\n\n\nasync def give():\n    return SEEN\n\n\n"
            'async def take(deps):\n    deps["a"].append(1)\n    return 1\n\n\n')), "R11"),
    "module-alias-cycle": (_script(
        "b = SEEN\nc = b\nb = c\ny = b[0:]\ny.append(1)\nc.append(1)\nreturn 1\n",
        before="SEEN = []\n\n\n"), "R11"),
    "module-alias-too-long-to-follow": (_script(
        "x0 = SEEN\n" + "".join(f"x{i + 1} = x{i}\n" for i in range(200))
        + "x200.append(1)\nreturn 1\n", before="SEEN = []\n\n\n"), "R11"),
    "module-get-then-mutate": (_script('CONFIG.get("sizes").append(1)\nreturn 1\n',
                                       before='CONFIG = {"sizes": [1]}\n\n\n'), "R11"),
    # ---- reflection and refused builtins ------------------------------------------------
    "repr": (_script("return repr(args)\n"), "R07"),
    "getattr": (_script('return getattr(args, "get")("k")\n'), "R06"),
    "setattr": (_script('setattr(args, "x", 1)\nreturn 1\n'), "R06"),
    "hasattr": (_script('return hasattr(args, "x")\n'), "R06"),
    "vars-dir": (_script("return [vars(args), dir(args)]\n"), "R06"),
    "type": (_script("return type(args)\n"), "R07"),
    "subclasses": (_script("return args.__class__.__subclasses__()\n"), "R06"),
    "bound-method-self": (_script('return "".join.__self__\n'), "R06"),
    # ---- ctx.run take= ------------------------------------------------------------------
    "take-zero": (_script('return await ctx.run("image.generate", {}, take=0)\n'), "R10"),
    "take-name": (_script('return await ctx.run("image.generate", {}, take=args["n"])\n'),
                  "R10"),
    "take-float": (_script('return await ctx.run("image.generate", {}, take=2.0)\n'), "R10"),
    "take-bool": (_script('return await ctx.run("image.generate", {}, take=True)\n'), "R10"),
    "take-too-many": (_script('return await ctx.run("image.generate", {}, take=101)\n'),
                      "R10"),
    "take-from-data": (_script('return await ctx.run("image.generate", {}, take=args["n"])\n'),
                       "R10"),
    "take-and-other-keyword": (_script(
        'return await ctx.run("image.generate", {}, take=2, retries=3)\n'), "R10"),
    "take-twice-via-kwargs": (_script(
        'return await ctx.run("image.generate", {}, take=2, **{"take": 3})\n'), "R10"),
    # ---- sizes as arguments, text forms of non-data, annotations that run -----------------
    "format-width": (_script('return f"{1:900000000}"\n'), "R00"),
    "format-precision": (_script('return f"{1.5:.900000000f}"\n'), "R00"),
    "format-width-variable": (_script('w = 9\nreturn f"{1:{w}}"\n'), "R00"),
    "center-huge": (_script('return "a".center(10 ** 9)\n'), "R00"),
    "ljust-variable": (_script('n = 5\nreturn "a".ljust(n)\n'), "R00"),
    "rjust-keyword": (_script('return "a".rjust(width=10 ** 9)\n'), "R00"),
    "zfill-huge": (_script('return "1".zfill(999999999)\n'), "R00"),
    "expandtabs-keyword": (_script('return "\\t".expandtabs(tabsize=10 ** 9)\n'), "R00"),
    # repetition counts, exponents, shifts and range sizes from data (issue 28.5)
    "repeat-string-by-args": (_script('return "x" * args["n"]\n'), "R00"),
    "repeat-list-by-args": (_script('return [0] * int(args["n"])\n'), "R00"),
    "repeat-count-first": (_script('n = args["n"]\nreturn n * "ab"\n'), "R00"),
    "repeat-augmented": (_script('s = "x"\ns *= args["n"]\nreturn s\n'), "R00"),
    "repeat-by-unbounded-len": (_script('w = len(args["xs"])\nreturn "=" * w\n'), "R00"),
    "repeat-of-two-unknowns": (_script('return args["a"] * args["b"]\n'), "R00"),
    "repeat-through-helper": (_script('return pad("x", args["n"])\n',
                                      before="def pad(s, n):\n    return s * n\n\n\n"),
                              "R00"),
    "power-by-args": (_script('return str(2 ** args["n"])[:5]\n'), "R00"),
    "power-augmented": (_script('x = 3\nx **= int(args["n"])\nreturn x\n'), "R00"),
    "shift-by-args": (_script('return 1 << args["n"]\n'), "R00"),
    "shift-augmented": (_script('x = 1\nx <<= len(args["xs"])\nreturn x\n'), "R00"),
    "range-materialised": (_script('return len(list(range(args["n"])))\n'), "R00"),
    "range-sorted": (_script('return sorted(range(int(args["n"])))[:3]\n'), "R00"),
    "range-unpacked": (_script('return [*range(args["n"])][:3]\n'), "R00"),
    "range-past-the-loop-bound": (_script("return tuple(range(10 ** 6))[:3]\n"), "R00"),
    "str-of-function": (_with_helper("return str(helper)\n"), "R04"),
    "fstring-of-function": (_with_helper('return f"{helper}"\n'), "R04"),
    "str-of-coroutine": (_with_helper("c = helper()\ns = str(c)\nawait c\nreturn s\n"),
                         "R04"),
    "fstring-of-call": (_with_helper('return f"{helper()}"\n'), "R04"),
    "str-of-ctx-awaitable": (_script('return str(ctx.run("image.generate", {}))\n'), "R04"),
    "str-of-genexp": (_script("return str(x for x in [1])\n"), "R04"),
    "ascii-of-zip": (_script("return ascii(zip([1], [2]))\n"), "R04"),
    "fstring-of-map-alias": (_script('m = map(str, [1])\nreturn f"{m}"\n'), "R04"),
    "annotation-call": (_script("return 1\n", before="def probe(x: print('hi')):\n"
                                "    return x\n\n\n"), "R11"),
    "return-annotation-comprehension": (_script(
        "return 1\n", before="def probe(x) -> [i for i in range(10)]:\n    return x\n\n\n"),
        "R11"),
    "module-annotated-assignment": ("X: len([1]) = 1\n" + _script("return X\n"), "R11"),
}


@pytest.mark.parametrize(("source", "rule"), list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_script_is_rejected(source: str, rule: str) -> None:
    report = check(source)
    assert not report.valid, source
    assert rule in report.rules(), report.to_json()
    violation = next(v for v in report.violations if v.rule == rule)
    assert violation.line >= 1 and violation.message and violation.hint


def test_take_twice_is_one_r10() -> None:
    # ast.parse accepts a repeated keyword (only the compiler refuses it): R10 names it.
    report = check(_script('return await ctx.run("image.generate", {}, take=1, take=2)\n'))
    assert report.rules() == ["R10"], report.to_json()
    assert "once" in report.violations[0].message


@pytest.mark.parametrize("name", ["send", "throw", "close", "get_loop", "cr_frame",
                                  "gi_frame", "f_back", "with_traceback", "args"])
def test_escape_names_say_why(name: str) -> None:
    report = check(_script(f"return args.{name}\n"))
    (violation,) = [v for v in report.violations if v.rule == "R06"]
    assert f".{name}" in violation.message
    assert "not an attribute scripts may use" not in violation.message, violation.message


# Legitimate scripts a model writes; every one must be accepted unchanged.
LEGITIMATE: dict[str, str] = {
    "padding-and-specs": _script('x = 3.14159\nn = len(args)\nreturn [f"{x:.2f}", f"{n:>10}", '
                                 '"a".ljust(12), "7".zfill(3), f"{n:,}"]\n'),
    "text-of-results": _script('r = await ctx.run("text.generate", {"prompt": "a"})\n'
                               'rows = list(zip([1], [2]))\nreturn str(r) + f"{r} {rows}"\n'),
    "type-annotations": _script("n: int = 3\nreturn await helper(n)\n",
                                before="async def helper(n: int) -> list[str] | None:\n"
                                "    return [str(n)]\n\n\n"),
    "join-strip-lower": _script(
        'parts = [p.strip().lower() for p in args["parts"][:8]]\nreturn ", ".join(parts)\n'),
    "dict-get-default": _script('return args.get("k", "") + str(args.get("n", 0))\n'),
    "nested-subscripts": _script(
        'result = await ctx.run("image.generate", {"prompt": "x"})\n'
        'return result["artifact"]["id"]\n'),
    "list-append": _script('out = []\nfor s in args["s"][:4]:\n    out.append(s)\nreturn out\n'),
    "error-fields": _script(
        'try:\n    return await ctx.run("text.generate", {"prompt": "x"})\n'
        "except CapabilityError as e:\n"
        '    ctx.log(f"{e.capability} failed: {e.message} ({e.code}, {e.status})")\n'
        '    return {"error": str(e), "identity": e.identity}\n'),
    "fstrings": _script('n = len(args)\nreturn f"{n:>4} items, {n / 3:.2f} each, {args!s}"\n'),
    "sorted-key-helper": _script('return sorted(args["x"][:5], key=weight)\n',
                                 before="def weight(item):\n    return len(item)\n\n\n"),
    "modulo-loop-index": _script(
        "odd = []\nfor i in range(8):\n    if i % 2:\n        odd.append(i)\nreturn odd\n"),
    "modulo-enumerate-index": _script(
        'for i, s in enumerate(args["x"][:6]):\n    if i % 3 == 0:\n        ctx.log(s)\n'
        "return 1\n"),
    "modulo-numeric-locals": _script(
        'n = len(args["x"])\ntotal = 0\nfor s in args["x"][:4]:\n    total += len(s)\n'
        "return [n % 3, total % 10, -7 % 3, (n + 1) % 2, max(n, 1) % 4, 7.5 % 2]\n"),
    "modulo-module-constant": _script("return [N % 4, args[\"k\"] if N % 2 else 0]\n",
                                      before="N = 10\n\n\n"),
    "modulo-running-total": _script(
        'total = 0\nfor s in args["x"][:3]:\n    total = total + len(s)\n'
        "return [total % 2, SIZES[total % 2] % 7]\n", before="SIZES = [256, 512]\n\n\n"),
    "list-grown-by-concatenation": _script(
        'acc = []\nfor s in args["x"][:3]:\n    acc = acc + [s]\nacc.append(SIZES[0])\n'
        "return acc\n", before="SIZES = [256, 512]\n\n\n"),
    "module-constants-read-and-copied": _script(
        "sizes = list(SIZES)\nsizes.append(64)\nconf = dict(CONF)\nconf[\"extra\"] = 1\n"
        "first = SIZES[0]\nrows = [dict(r) for r in ROWS]\nrows[0][\"seen\"] = True\n"
        "for s in SIZES:\n    ctx.log(str(s))\nreturn [sizes, conf, first, rows, len(CONF)]\n",
        before='SIZES = [256, 512]\nCONF = {"mode": "fast"}\nROWS = [{"a": 1}]\n\n\n'),
    "finally-without-exit": _script(
        'try:\n    r = await ctx.run("text.generate", {"prompt": "x"})\nfinally:\n'
        '    ctx.log("done")\n    for i in range(3):\n        if i:\n            break\n'
        "return r\n"),
    "return-after-finally": _script(
        "for i in range(3):\n    try:\n"
        '        r = await ctx.run("text.generate", {"prompt": str(i)})\n'
        '    except CapabilityError as e:\n        ctx.log(e.message)\n        continue\n'
        '    finally:\n        ctx.log("tried")\n    return r\nreturn None\n'),
    "take": _script('a = await ctx.run("image.generate", {"prompt": "x"}, take=2)\n'
                    'b = await ctx.run("image.generate", {"prompt": "y"}, take=100)\n'
                    "return [a, b]\n"),
    "set-frozenset-chr-ord-divmod": _script(
        'seen = set(args["x"][:4])\nfixed = frozenset(["a", "b"])\n'
        'q, r = divmod(ord("a"), 7)\nreturn [sorted(seen | fixed), chr(65 + r), q]\n'),
    "fullwidth-allowed-method": _script('return args.\uff47\uff45\uff54("k")\n'),
    "dict-views-and-numbers": _script(
        'd = {"a": 1}\nks = list(d.keys())\nvs = [v.bit_length() for v in d.values()]\n'
        "return [ks, vs, [k for k, v in d.items()], (1.5).is_integer()]\n"),
    "string-methods": _script(
        'name = args["name"]\n'
        'return [name.upper(), name.replace("a", "b"), name.split(","), '
        'name.startswith("x"), "-".join(name.splitlines()), name.zfill(4)]\n'),
    "bounded-repetition-and-powers": _script(
        'shots = args["shots"][:8]\nslots = [None] * len(shots)\nline = "-" * 40\n'
        'half = args["w"] * 0.5\nscaled = float(args["w"]) * args["k"]\n'
        'twice = args["tag"] * 2\nbits = [2 ** i for i in range(10)]\n'
        'masks = [1 << i for i in range(8)]\nroot = args["v"] ** 0.5\n'
        'ids = list(range(len(shots)))\nn = min(int(args["n"]), 50)\n'
        'pad = "." * n\nreturn [slots, line, half, scaled, twice, bits, masks, root, ids, '
        "pad]\n"),
    "numbers-times-numbers": _script(
        'a = int(args["a"])\nb = float(args["b"])\nx = a * b\nx *= 2\n'
        'y = len(args["xs"]) * a\nreturn [x, y, a ** 2, a << 3]\n'),
    "helper-mutates-local-list": _script(
        "acc = []\nfill(acc)\nreturn acc\n",
        before="def fill(acc):\n    acc.append(1)\n    return acc\n\n\n"),
}


@pytest.mark.parametrize("source", list(LEGITIMATE.values()), ids=list(LEGITIMATE))
def test_legitimate_script_is_accepted(source: str) -> None:
    report = check(source)
    assert report.valid, report.to_json()
    assert report.violations == ()


def test_corpus_sizes() -> None:
    assert len(HOSTILE) >= 30 and len(LEGITIMATE) >= 15

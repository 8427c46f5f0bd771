"""R00, sizes given as arguments: every size a script hands the interpreter, which then
allocates it at once, has a small static bound, by class rather than by instance.

* a padding width (``str.center/ljust/rjust/zfill``) or a tab size (``expandtabs``): a
  constant of at most ``string_chars``, written in place;
* a width or precision in a format spec: written in the spec, at most ``string_chars``
  (a spec computed at run time is refused);
* a repetition count (``seq * n``, ``n * seq``, ``seq *= n``): unless both sides are
  provably numbers (or one is a float), one side has a static upper bound of at most
  ``string_chars`` (``"-" * 40``, ``[None] * len(shots)`` with ``shots`` sliced);
* an exponent or a shift (``x ** n``, ``x << n``, and their ``**=`` / ``<<=``): a
  static upper bound of at most ``int_bits``, unless the power is of floats;
* the size of a ``range`` outside a loop header (``list(range(n))``, ``sorted(range(n))``,
  ``[*range(n)]``): a static bound of at most the loop bound R03 holds loops to (a range
  in a ``for`` or a comprehension is R03's).

Constant expressions are folded and sized by ``limits.huge_literals``; they are left to it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from .analysis import Analysis, nfkc, snippet
from .consts import MAX_INT_BITS, MAX_STR_LEN, NOT_CONSTANT, fold_quiet
from .loops import MAX_LOOP_BOUND
from .model import Violation
from .numeric import Numeric

_SIZED_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})
_SIZE_KEYWORDS = frozenset({"width", "tabsize"})
_NUMBER = re.compile(r"\d+")
_SIZE_HINT = (f"use a constant size written in place, at most {MAX_STR_LEN} (the longest "
              "string constant); build long text by joining a bounded list")
_REPEAT_HINT = (f"repeat a sequence a bounded number of times, at most {MAX_STR_LEN} (e.g. "
                '"-" * 40, or [None] * len(shots) with shots a constant-bound slice); to '
                "multiply numbers, wrap values from args or results in int(...) or float(...)")
_POWER_HINT = (f"use an exponent or shift with a static bound of at most {MAX_INT_BITS} "
               "(e.g. 2 ** i for i in range(10)), or float(...) for a power of floats")
_RANGE_HINT = (f"give range(...) a constant bound of at most {MAX_LOOP_BOUND}, e.g. "
               "range(min(n, 100)), or a constant-bound slice of a list")
_GROWING = {ast.Mult: "repeat", ast.Pow: "power", ast.LShift: "power"}


def check_sizes(an: Analysis) -> Iterator[Violation]:
    yield from _padding(an)
    yield from _format_specs(an)
    numeric = Numeric(an.model)
    operations: list[tuple[ast.AST, ast.operator, ast.AST, ast.AST]] = [
        (node, node.op, node.left, node.right) for node in an.nodes(ast.BinOp)]
    operations += [(node, node.op, node.target, node.value)
                   for node in an.nodes(ast.AugAssign)]
    for node, op, left, right in operations:
        kind = _GROWING.get(type(op))
        if kind is None or (_constant(an, left) and _constant(an, right)):
            continue
        if kind == "repeat":
            found = _repetition(an, numeric, node, left, right)
        else:
            found = _power(an, node, op, left, right)
        if found is not None:
            yield found
    yield from _ranges(an)


def _padding(an: Analysis) -> Iterator[Violation]:
    for call in an.nodes(ast.Call):
        func = call.func
        if not (isinstance(func, ast.Attribute) and nfkc(func.attr) in _SIZED_METHODS
                and not an.model.is_ctx(func.value)):
            continue
        sizes = [*call.args[:1], *(k.value for k in call.keywords if k.arg in _SIZE_KEYWORDS)]
        for size in sizes:
            if not (isinstance(size, ast.Constant) and type(size.value) is int
                    and 0 <= size.value <= MAX_STR_LEN):
                yield Analysis.violation("R00", call, f".{func.attr}({snippet(size, 30)}) "
                                         "allocates a size that is not a small constant",
                                         _SIZE_HINT)


def _format_specs(an: Analysis) -> Iterator[Violation]:
    for value in an.nodes(ast.FormattedValue):
        spec = value.format_spec
        if spec is None:
            continue
        parts = spec.values if isinstance(spec, ast.JoinedStr) else [spec]
        if any(not (isinstance(p, ast.Constant) and isinstance(p.value, str)) for p in parts):
            yield Analysis.violation("R00", value, "a format spec computed at run time (a "
                                     "width or precision from a variable)", _SIZE_HINT)
            continue
        text = "".join(str(p.value) for p in parts if isinstance(p, ast.Constant))
        if any(int(n) > MAX_STR_LEN for n in _NUMBER.findall(text)):
            yield Analysis.violation("R00", value, f"the format spec {text[:30]!r} asks for "
                                     f"more than {MAX_STR_LEN} characters", _SIZE_HINT)


def _repetition(an: Analysis, numeric: Numeric, node: ast.AST, left: ast.AST,
                right: ast.AST) -> Violation | None:
    if numeric.expr(left) and numeric.expr(right):
        return None
    if any(_floaty(an, side) or _at_most(an, side, MAX_STR_LEN) for side in (left, right)):
        return None
    return Analysis.violation("R00", node, f"{snippet(node, 40)} may repeat a sequence a "
                              "number of times with no static bound (or multiplies values "
                              "not known to be numbers)", _REPEAT_HINT)


def _power(an: Analysis, node: ast.AST, op: ast.operator, left: ast.AST, right: ast.AST
           ) -> Violation | None:
    if isinstance(op, ast.Pow) and (_floaty(an, left) or _floaty(an, right)):
        return None
    if _at_most(an, right, MAX_INT_BITS):
        return None
    what = "an exponent" if isinstance(op, ast.Pow) else "a shift"
    return Analysis.violation("R00", node, f"{snippet(node, 40)} has {what} with no static "
                              f"bound of at most {MAX_INT_BITS}: the integer it builds may "
                              "be huge", _POWER_HINT)


def _ranges(an: Analysis) -> Iterator[Violation]:
    headers = {id(n) for loop in [*an.nodes(ast.For), *an.nodes(ast.comprehension)]
               for n in ast.walk(loop.iter)}  # R03 bounds the ranges of loop headers
    for call in an.nodes(ast.Call):
        if id(call) in headers or not an.model.is_builtin_ref(call.func, "range"):
            continue
        count = an.bounds.range_count(call)
        if count is None or count > MAX_LOOP_BOUND:
            size = "no static bound" if count is None else f"up to {count} numbers"
            yield Analysis.violation("R00", call, f"{snippet(call, 40)} has {size} (limit "
                                     f"{MAX_LOOP_BOUND})", _RANGE_HINT)


def _at_most(an: Analysis, node: ast.AST, limit: int) -> bool:
    """Does ``node`` evaluate to an integer with a static upper bound of at most ``limit``?"""
    high = an.bounds.interval(node)[1]
    return high is not None and high <= limit


def _floaty(an: Analysis, node: ast.AST) -> bool:
    """Provably a float: a float literal, ``float(...)``, or a true division."""
    if isinstance(node, ast.Constant):
        return type(node.value) is float
    if isinstance(node, ast.UnaryOp):
        return _floaty(an, node.operand)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return True
    return isinstance(node, ast.Call) and an.model.is_builtin_ref(node.func, "float")


def _constant(an: Analysis, node: ast.AST) -> bool:
    return fold_quiet(node, an.model.env) is not NOT_CONSTANT

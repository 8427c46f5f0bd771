"""R03 (statically bounded loops) and R04 (determinism: clocks, randomness, set order)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, snippet
from .builtins import (
    NONDETERMINISTIC_ATTRS,
    NONDETERMINISTIC_NAMES,
    ORDER_FREE_CONSUMERS,
    SET_BUILDERS,
    SET_METHODS,
)
from .model import Violation

MAX_LOOP_BOUND = 10_000
MAX_TOTAL_ITERATIONS = 1_000_000

_BOUND_HINT = (f"iterate over range(N) with a constant N (at most {MAX_LOOP_BOUND}), a list "
               "literal, or a constant-bound slice such as args[\"items\"][:10]; "
               "enumerate/zip/sorted/reversed of those are fine too")


def _r03(node: ast.AST, message: str, hint: str = _BOUND_HINT) -> Violation:
    return Analysis.violation("R03", node, message, hint)


def check_loops(an: Analysis) -> Iterator[Violation]:
    for node in an.nodes(ast.While):
        yield _r03(node, "while loops are not allowed (no static bound)",
                   "use for i in range(N) with a constant N and break when done")
    for node in an.nodes(ast.AsyncFor):
        yield _r03(node, "async for is not allowed", _BOUND_HINT)
    for node in an.nodes(ast.For):
        yield from _bounded(an, node, node.iter, "for loop")
    for gen in an.nodes(ast.comprehension):
        if gen.is_async:
            yield _r03(gen.iter, "async comprehensions are not allowed", _BOUND_HINT)
        else:
            yield from _bounded(an, gen, gen.iter, "comprehension")


def _bounded(an: Analysis, loop: ast.AST, iterable: ast.expr, what: str) -> Iterator[
        Violation]:
    count = an.bounds.length(iterable)
    if count is None:
        yield _r03(iterable, f"{what} over {snippet(iterable)} has no static bound")
        return
    if count > MAX_LOOP_BOUND:
        yield _r03(iterable, f"{what} over {snippet(iterable)} may run {count} times "
                   f"(limit {MAX_LOOP_BOUND})")
        return
    total = an.bounds.multiplicity([*an.model.loops_of(loop), iterable])
    if total is not None and total > MAX_TOTAL_ITERATIONS:
        yield _r03(iterable, f"nested loops may run {total} times in total "
                   f"(limit {MAX_TOTAL_ITERATIONS})",
                   "use smaller constant bounds in the nested loops")


# ---- R04 ------------------------------------------------------------------------------------

_SET_HINT = "wrap the set in sorted(...) before iterating, or build a list instead"
_CLOCK_HINT = ("scripts must be deterministic: pass times, seeds and ids in args, or get "
               "them from a capability with await ctx.run(...)")


def check_determinism(an: Analysis) -> Iterator[Violation]:
    for name in an.model.free_names:
        reason = NONDETERMINISTIC_NAMES.get(name.id)
        if reason:
            yield Analysis.violation("R04", name, f"{name.id} reads {reason}", _CLOCK_HINT)
    for call in an.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute):
            if func.attr in _WATCHED_ATTRS and not an.model.is_ctx(func.value):
                yield from _nondeterministic_method(an, call, func)
        elif (isinstance(func, ast.Name) and call.args and func.id not in ORDER_FREE_CONSUMERS
              and an.model.owner_of(func) is None):
            for arg in call.args:
                if _is_set(an, arg):
                    yield Analysis.violation("R04", arg, f"{func.id}() of the set "
                                             f"{snippet(arg)} depends on set order", _SET_HINT)
    for loop in an.nodes(ast.For, ast.comprehension):
        if _is_set(an, loop.iter):
            yield Analysis.violation("R04", loop.iter, f"iterating over the set "
                                     f"{snippet(loop.iter)} has no stable order", _SET_HINT)
    for node in an.nodes(ast.Starred, ast.FormattedValue):
        if _is_set(an, node.value):
            yield Analysis.violation("R04", node, f"{snippet(node.value)} is a set; its order "
                                     "is not stable", _SET_HINT)


_WATCHED_ATTRS = NONDETERMINISTIC_ATTRS | {"pop", "join", "fromkeys"}


def _nondeterministic_method(an: Analysis, node: ast.Call,
                             func: ast.Attribute) -> Iterator[Violation]:
    receiver = func.value
    named = isinstance(receiver, ast.Name) and receiver.id in NONDETERMINISTIC_NAMES
    if func.attr in NONDETERMINISTIC_ATTRS and not named:
        yield Analysis.violation("R04", node, f".{func.attr}() reads a clock, randomness "
                                 "or the environment", _CLOCK_HINT)
    if func.attr == "pop" and not node.args and _is_set(an, func.value):
        yield Analysis.violation("R04", node, "set.pop() removes an arbitrary element",
                                 _SET_HINT)
    if func.attr in ("join", "fromkeys") and any(_is_set(an, a) for a in node.args):
        yield Analysis.violation("R04", node, f".{func.attr}() of a set has no stable "
                                 "order", _SET_HINT)


def _is_set(an: Analysis, node: ast.AST | None, seen: frozenset[int] = frozenset()) -> bool:
    """Is this expression (possibly) a set? Follows local names through their bindings."""
    if node is None or id(node) in seen or len(seen) > 50:
        return False
    seen = seen | {id(node)}
    if isinstance(node, ast.Set | ast.SetComp):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id in SET_BUILDERS:
            return an.model.owner_of(func) is None
        if isinstance(func, ast.Attribute) and func.attr in (*SET_METHODS, "copy"):
            return _is_set(an, func.value, seen)
        return False
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr | ast.BitAnd | ast.Sub
                                                  | ast.BitXor):
        return _is_set(an, node.left, seen) or _is_set(an, node.right, seen)
    if isinstance(node, ast.Await):
        return _is_set(an, node.value, seen)
    if isinstance(node, ast.Name):
        _, bindings = an.model.bindings_of(node.id, node)
        return any(b.kind == "assign" and not b.path and _is_set(an, b.value, seen)
                   for b in bindings)
    return False

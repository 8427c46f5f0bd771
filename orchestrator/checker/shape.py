"""R01 (entry point and top-level shape) and R11 (forbidden constructs)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Any

from .analysis import Analysis
from .bindings import FUNCTION_TYPES, FunctionNode
from .consts import NOT_CONSTANT, Folder, TooLarge
from .model import Violation

_ENTRY = "async def orchestrate(ctx, args):"
# Top-level statements another rule already names more precisely.
_OWNED_ELSEWHERE = (ast.Import, ast.ImportFrom, ast.ClassDef, ast.Global, ast.Nonlocal,
                    ast.With, ast.AsyncWith, ast.While, ast.Match, ast.AsyncFor)


def _r01(node: ast.AST | int, message: str, hint: str) -> Violation:
    return Analysis.violation("R01", node, message, hint)


def check_shape(an: Analysis) -> Iterator[Violation]:
    yield from _entry_point(an.tree)
    env: dict[str, Any] = {}
    for index, stmt in enumerate(an.tree.body):
        yield from _top_level(stmt, index, env)


def _entry_point(tree: ast.Module) -> Iterator[Violation]:
    defs = [s for s in tree.body if isinstance(s, FunctionNode) and s.name == "orchestrate"]
    others = [s for s in tree.body if isinstance(s, ast.Assign | ast.AnnAssign) and any(
        isinstance(t, ast.Name) and t.id == "orchestrate"
        for t in (s.targets if isinstance(s, ast.Assign) else [s.target]))]
    if not defs:
        yield _r01(1, "the script has no entry point",
                   f"define the entry point at top level: {_ENTRY} ... return <JSON value>")
        return
    for extra in [*defs[1:], *others]:
        yield _r01(extra, "orchestrate is defined more than once",
                   "keep exactly one top-level async def orchestrate(ctx, args)")
    entry = defs[0]
    if not isinstance(entry, ast.AsyncFunctionDef):
        yield _r01(entry, "orchestrate is a plain def; it must be async",
                   f"write {_ENTRY} and await ctx calls inside it")
    args = entry.args
    positional = [*args.posonlyargs, *args.args]
    if (len(positional) != 2 or args.posonlyargs or args.vararg or args.kwarg
            or args.kwonlyargs or args.defaults):
        yield _r01(entry, "orchestrate must take exactly two parameters, (ctx, args)",
                   f"use the signature {_ENTRY} with no defaults, *args or **kwargs")


def _top_level(stmt: ast.stmt, index: int, env: dict[str, Any]) -> Iterator[Violation]:
    if isinstance(stmt, FunctionNode) or isinstance(stmt, _OWNED_ELSEWHERE):
        return
    if (index == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str)):
        return
    if isinstance(stmt, ast.Assign | ast.AnnAssign):
        yield from _constant_assignment(stmt, env)
        return
    kind = type(stmt).__name__.lower()
    yield _r01(stmt, f"a top-level '{kind}' statement is not allowed",
               "at top level keep only a docstring, function definitions and NAME = <literal> "
               "constants; move logic into async def orchestrate(ctx, args)")


def _constant_assignment(stmt: ast.Assign | ast.AnnAssign, env: dict[str, Any]) -> Iterator[
        Violation]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    if not all(isinstance(t, ast.Name) for t in targets) or stmt.value is None:
        yield _r01(stmt, "a top-level assignment must bind a single NAME to a constant",
                   "write NAME = <literal>, one name per line, or move it into orchestrate")
        return
    try:
        value = Folder(env).fold(stmt.value)
    except TooLarge:
        return  # R00 reports the huge literal
    if value is NOT_CONSTANT:
        yield _r01(stmt, "a top-level assignment must be a constant (literals, containers of "
                   "literals and arithmetic on them)",
                   "compute values inside orchestrate; at top level only NAME = <literal>")
        return
    for target in targets:
        if isinstance(target, ast.Name):
            env[target.id] = value


# ---- R11 ------------------------------------------------------------------------------------

_FORBIDDEN: dict[type[ast.AST], tuple[str, str]] = {
    ast.Global: ("'global' is not allowed", "pass values as parameters and return results"),
    ast.Nonlocal: ("'nonlocal' is not allowed",
                   "return the new value from the helper and assign it in the caller"),
    ast.ClassDef: ("class definitions are not allowed", "use dicts for records and plain "
                   "functions for behaviour"),
    ast.Lambda: ("lambda is not allowed", "define a named helper with def"),
    ast.Yield: ("yield (a generator) is not allowed",
                "build and return a list instead of yielding items"),
    ast.YieldFrom: ("yield from (a generator) is not allowed",
                    "build and return a list instead of yielding items"),
    ast.With: ("'with' is not allowed", "there are no resources to manage; remove the with "
               "block and keep its body"),
    ast.AsyncWith: ("'async with' is not allowed", "remove the async with block and keep "
                    "its body"),
    ast.Match: ("'match' is not allowed (class patterns read attributes)",
                "use if/elif/else with == comparisons"),
    ast.Assert: ("assert is not allowed (python -O removes it)",
                 "use: if not condition: raise ValueError(\"...\")"),
    ast.NamedExpr: ("the walrus operator := is not allowed",
                    "assign the value on its own line first, then use the name"),
}


def check_constructs(an: Analysis) -> Iterator[Violation]:
    for kind in _FORBIDDEN.keys() & an.model.buckets.keys():
        message, hint = _FORBIDDEN[kind]
        for node in an.nodes(kind):
            yield Analysis.violation("R11", node, message, hint)
    for node in an.nodes(*FUNCTION_TYPES):
        if node.decorator_list:
            yield Analysis.violation("R11", node.decorator_list[0],
                                     f"decorator on {node.name} is not allowed",
                                     "remove the decorator and call helpers explicitly")
    for node in an.nodes(ast.Delete):
        yield from _delete(node)
    for node in an.nodes(ast.Await):
        yield from _await(an, node)


def _delete(node: ast.Delete) -> Iterator[Violation]:
    for target in node.targets:
        # an attribute target is R06 (attribute store and delete)
        if not isinstance(target, ast.Name | ast.Subscript | ast.Attribute):
            yield Analysis.violation("R11", target, "del is only allowed on names and "
                                     "subscripts (del d[\"key\"])",
                                     "delete dict keys or list items with del x[key]")


def _await(an: Analysis, node: ast.Await) -> Iterator[Violation]:
    scope = an.model.scope_of(node).function
    owner = scope.node if scope is not None else None
    if not isinstance(owner, ast.AsyncFunctionDef):
        yield Analysis.violation("R11", node, "await outside an async function",
                                 "await only inside async def functions (make the helper "
                                 "async def and await it from orchestrate)")


# ---- finally ----------------------------------------------------------------------------------

_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_STOP_AT = (*FUNCTION_TYPES, ast.Lambda, ast.ClassDef, ast.Module)
_EXIT_HINT = ("move the {word} after the try statement; a finally block must run to its "
              "end, because leaving it early would discard the host's safety stop")


def check_finally_exits(an: Analysis) -> Iterator[Violation]:
    """``return``, ``break`` or ``continue`` leaving a ``finally`` block would silently
    discard whatever was propagating, including the host's safety stops."""
    for node in an.nodes(ast.Return, ast.Break, ast.Continue):
        if _leaves_finally(an, node):
            word = type(node).__name__.lower()
            yield Analysis.violation("R11", node, f"'{word}' inside a finally block is not "
                                     "allowed", _EXIT_HINT.format(word=word))


def _leaves_finally(an: Analysis, node: ast.stmt) -> bool:
    loop_exit = not isinstance(node, ast.Return)
    child: ast.AST = node
    parent = an.parent(node)
    while parent is not None and not isinstance(parent, _STOP_AT):
        if loop_exit and isinstance(parent, _LOOPS) and _in_block(child, parent.body):
            return False  # break/continue of a loop that is itself inside the block
        if isinstance(parent, ast.Try | ast.TryStar) and _in_block(child, parent.finalbody):
            return True
        child, parent = parent, an.parent(parent)
    return False


def _in_block(node: ast.AST, block: list[ast.stmt]) -> bool:
    return any(stmt is node for stmt in block)

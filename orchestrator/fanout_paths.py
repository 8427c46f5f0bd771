"""Which fanout element a fanout path refers to, for the repair prompt (pure).

A call's fanout path holds one branch index per fanout it is inside: the
index in the list given to ``ctx.parallel`` / ``ctx.race``, the stage of
``ctx.pipeline``, the node of ``ctx.dag`` in the order written. A model reads
``path [2]`` more easily as "element 2 of ``enumerate(shots[:32])`` in the
ctx.parallel at line 9, = (2, 'a gull')". ``describe_path`` finds the
outermost fanout that the call's chain enters, names the iterable of its list
comprehension (or its literal items), and evaluates the element when that is
possible from the run's args and the script's literal constants alone, with a
tiny evaluator that knows literals, names, subscripts, slices, ``.get`` and a
few pure builtins (nothing of the script is executed).
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from typing import Any

from broker.syntax import parse_python

_FANOUTS = frozenset({"parallel", "race", "dag", "pipeline"})
_MAX_ITEMS = 10_000
_SHOWN = 160


class _Unknown(Exception):
    """The expression cannot be evaluated from args and constants alone."""


@dataclass(frozen=True)
class Fanout:
    kind: str  # parallel | race | dag | pipeline
    line: int  # of the ctx.<kind> call
    first: int  # the lines whose calls run in its branches
    last: int
    items: str  # what a branch index counts, as source text
    values: tuple[str, ...] | None  # each branch's element, shown, when known


def fanouts(text: str, args: Any) -> list[Fanout]:
    """Every ctx.parallel/race/dag/pipeline call of the script, outermost first."""
    try:
        tree = parse_python(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    env = _Env(tree, args)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in _FANOUTS and isinstance(node.func.value, ast.Name)
                and node.args):
            found.append(_fanout(node, node.func.attr, env, text))
    return sorted(found, key=lambda f: (f.first, -f.last))


def _fanout(call: ast.Call, kind: str, env: _Env, text: str) -> Fanout:
    spec = env.definition(call.args[0])
    first, last = spec.lineno, spec.end_lineno or spec.lineno
    if isinstance(spec, ast.ListComp) and len(spec.generators) == 1:
        iterable = spec.generators[0].iter
        items = ast.get_source_segment(text, iterable) or ast.unparse(iterable)
        values = env.sequence(iterable)
        shown = None if values is None else tuple(_show(v) for v in values)
        return Fanout(kind, call.lineno, first, last, f"`{items}`", shown)
    if isinstance(spec, ast.List | ast.Tuple):
        code = tuple(_code(ast.get_source_segment(text, e) or ast.unparse(e))
                     for e in spec.elts)
        return Fanout(kind, call.lineno, first, last, "the items written in the list", code)
    if isinstance(spec, ast.Dict):
        keys = tuple(_show(k.value) if isinstance(k, ast.Constant) else "?" for k in spec.keys
                     if k is not None)
        return Fanout(kind, call.lineno, first, last, "the nodes of the dict, in order", keys)
    source = ast.get_source_segment(text, spec) or ast.unparse(spec)
    return Fanout(kind, call.lineno, first, last, f"`{source}`", None)


def describe_path(path: list[int] | tuple[int, ...], entry_line: int | None,
                  found: list[Fanout]) -> str:
    """``path [2]: element 2 of `xs[:8]` in the ctx.parallel at line 9, = 'a gull'``."""
    if not path:
        return "path []: not inside any fanout"
    text = f"path {list(path)}"
    outer = _enclosing(entry_line, found)
    if outer is None:
        return (f"{text}: branch {path[0]} of the outermost fanout (0-based: the item of a "
                "ctx.parallel/ctx.race list, stage of ctx.pipeline, or node of ctx.dag in the "
                "order written)" + _inner(path))
    index = path[0]
    text += f": element {index} of {outer.items} in the ctx.{outer.kind} at line {outer.line}"
    if outer.values is not None and 0 <= index < len(outer.values):
        text += f", = {outer.values[index]}"
    return text + _inner(path)


def _inner(path: list[int] | tuple[int, ...]) -> str:
    if len(path) < 2:
        return ""
    return "; then " + ", ".join(f"branch {i}" for i in path[1:]) + " of the fanouts inside it"


def _enclosing(line: int | None, found: list[Fanout]) -> Fanout | None:
    if line is None:
        return None
    outer = [f for f in found if f.first <= line <= f.last]
    return outer[0] if outer else None


def _show(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _code(text: str) -> str:
    text = " ".join(text.split())
    return f"`{text if len(text) <= _SHOWN else text[:_SHOWN] + '…'}`"


# ---- a tiny evaluator over literals, args and constants --------------------------------------


class _Env:
    def __init__(self, tree: ast.Module, args: Any) -> None:
        self.args = args
        self.names: dict[str, ast.expr] = {}
        counts: dict[str, int] = {}
        scopes: list[list[ast.stmt]] = [tree.body]
        scopes += [n.body for n in tree.body if isinstance(n, ast.AsyncFunctionDef)
                   and n.name == "orchestrate"]
        for body in scopes:
            for stmt in body:
                if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                        and isinstance(stmt.targets[0], ast.Name)):
                    name = stmt.targets[0].id
                    counts[name] = counts.get(name, 0) + 1
                    self.names[name] = stmt.value
        # A name assigned twice has no single value: leave it unknown.
        for name, count in counts.items():
            if count > 1:
                del self.names[name]

    def definition(self, node: ast.expr) -> ast.expr:
        """A fanout's list, through one variable (``tasks = [...]; ctx.parallel(tasks)``)."""
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.names[node.id]
        return node

    def sequence(self, node: ast.expr) -> tuple[Any, ...] | None:
        try:
            value = self.value(node, 0)
        except (_Unknown, RecursionError, TypeError, ValueError, KeyError, IndexError):
            return None  # whatever the data, an element that cannot be named is not named
        if isinstance(value, dict):
            value = list(value)
        return tuple(value) if isinstance(value, list | tuple) else None

    def value(self, node: ast.expr, depth: int) -> Any:
        if depth > 20:
            raise _Unknown
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == "args":
                return self.args
            if node.id in self.names:
                return self.value(self.names[node.id], depth + 1)
            raise _Unknown
        if isinstance(node, ast.List | ast.Tuple):
            return [self.value(e, depth + 1) for e in node.elts]
        if isinstance(node, ast.Subscript):
            return self._subscript(node, depth)
        if isinstance(node, ast.Call):
            return self._call(node, depth)
        raise _Unknown

    def _subscript(self, node: ast.Subscript, depth: int) -> Any:
        base = self.value(node.value, depth + 1)
        if isinstance(node.slice, ast.Slice):
            bounds = [None if part is None else self.value(part, depth + 1)
                      for part in (node.slice.lower, node.slice.upper, node.slice.step)]
            if not isinstance(base, list | tuple | str):
                raise _Unknown
            return base[slice(*bounds)]
        key = self.value(node.slice, depth + 1)
        try:
            return base[key]
        except (KeyError, IndexError, TypeError):
            raise _Unknown from None

    def _call(self, node: ast.Call, depth: int) -> Any:
        if node.keywords:
            raise _Unknown
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            base = self.value(node.func.value, depth + 1)
            if not isinstance(base, dict) or not 1 <= len(node.args) <= 2:
                raise _Unknown
            values = [self.value(a, depth + 1) for a in node.args]
            return base.get(*values)
        if not isinstance(node.func, ast.Name):
            raise _Unknown
        values = [self.value(a, depth + 1) for a in node.args]
        return _builtin(node.func.id, values)


_ITERATORS: dict[str, Any] = {"enumerate": enumerate, "zip": zip, "list": list, "sorted": sorted,
                              "reversed": reversed, "tuple": tuple}


def _builtin(name: str, values: list[Any]) -> list[Any]:
    """A pure builtin over values already in memory (``range`` is sized before it is built)."""
    try:
        if name == "range" and 1 <= len(values) <= 3 and all(
                isinstance(v, int) and not isinstance(v, bool) for v in values):
            numbers = range(*values)
            if len(numbers) > _MAX_ITEMS:
                raise _Unknown
            return list(numbers)
        if name in _ITERATORS and all(isinstance(v, list | tuple | str | dict) for v in values):
            result = list(_ITERATORS[name](*values))
            if len(result) <= _MAX_ITEMS:
                return [list(v) if isinstance(v, tuple) else v for v in result]
    except (TypeError, ValueError):
        pass
    raise _Unknown

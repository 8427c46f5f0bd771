"""R11: top-level constants are never changed (no module-level mutable state).

``SIZES = [...]`` and ``CONFIG = {...}`` at top level are fine to read, but a script that
changes one keeps state outside the call tree the host annotates. Each expression gets a
*taint*: which top-level constant it may share objects with, how deep inside that constant
it points (``depth``), and from which nesting level below it objects are shared (``shared``:
0 = the object itself, 1 = its elements, as after ``list(CONST)``). A mutation (a mutating
method, a subscript store or delete, ``+=`` on a list) is refused when it can change an
object at ``shared == 0`` and the constant holds a list, dict or set at that depth. Taints
flow through aliases, subscripts, loop variables, ``.get``/``min``/``max``, helper
parameters and helper return values, and into functions run by ``ctx.pipeline`` and
``ctx.dag``.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

from .analysis import Analysis, snippet
from .bindings import FUNCTION_TYPES, Binding, Scope
from .builtins import MUTATING_METHODS
from .model import Violation
from .scope import ScriptModel

Taint = frozenset[tuple[str, int, int]]  # (constant name, depth, shared-from level)
CLEAN: Taint = frozenset()

STATE_MUTATORS = MUTATING_METHODS | frozenset({
    "difference_update", "intersection_update", "symmetric_difference_update"})
_COPY_BUILTINS = frozenset({"list", "dict", "tuple", "set", "frozenset", "sorted", "reversed"})
_COPY_METHODS = frozenset({"copy", "values", "items", "keys"})
_ELEMENT_METHODS = frozenset({"get", "pop", "setdefault"})
_MAX_DEPTH = 64
MAX_QUERY_DEPTH = 60  # queries open at once (x2 = x1; x1 = CONST; ...)
MAX_STEPS = 5_000  # queries computed per script
MAX_ROUNDS = 64  # rounds of one fixpoint (the clamped lattice is small)


def mutable_depths(value: Any, depth: int = 0, found: set[int] | None = None) -> set[int]:
    """The nesting depths at which a folded constant holds a list, dict or set."""
    found = set() if found is None else found
    if depth > _MAX_DEPTH:
        return found
    if isinstance(value, list | dict | set):
        found.add(depth)
    items = value.values() if isinstance(value, dict) else value
    if isinstance(value, list | tuple | dict):
        for item in items:
            mutable_depths(item, depth + 1, found)
    return found


def _element(taint: Taint) -> Taint:
    return frozenset((r, d + 1, max(k - 1, 0)) for r, d, k in taint)


def _copy(taint: Taint) -> Taint:
    return frozenset((r, d, max(k, 1)) for r, d, k in taint)


def _wrap(taint: Taint) -> Taint:
    """A new container holding values with this taint."""
    return frozenset((r, d - 1, k + 1) for r, d, k in taint)


def _union(taints: Iterable[Taint]) -> Taint:
    out: set[tuple[str, int, int]] = set()
    for taint in taints:
        out |= taint
    return frozenset(out)


class Taints:
    """Memoised taint queries over one ScriptModel."""

    def __init__(self, model: ScriptModel, mutable: dict[str, set[int]]) -> None:
        self.m = model
        self.mutable = mutable
        self._final: dict[Hashable, Taint] = {}
        self._provisional: dict[Hashable, Taint] = {}
        self._busy: set[Hashable] = set()
        self._hits: set[Hashable] = set()
        self._steps = 0
        # Depths and share levels are clamped to a small box, so fixpoints always settle.
        self._limit = max(max(depths) for depths in mutable.values()) + 2
        # Any mutable part of any constant: the answer when a query is too deep to follow.
        self._anything: Taint = frozenset(
            (root, depth, 0) for root, depths in mutable.items() for depth in depths)
        self._return_values: dict[int, list[ast.expr]] = {}
        for ret in model.buckets.get(ast.Return, ()):
            owner = model.scope_of(ret).function
            if owner is not None and ret.value is not None:
                self._return_values.setdefault(id(owner.node), []).append(ret.value)

    def _fixpoint(self, key: Hashable, compute: Callable[[], Taint]) -> Taint:
        """Memoised least fixpoint of ``compute`` for a name, a function result, ...

        A query met again while it is being computed (x = y; y = x + [z]) answers with its
        provisional value and the outer query repeats until nothing changes. A result that
        leaned on an unfinished outer query stays provisional (it is recomputed when asked
        again), so no unfinished guess is ever kept as final."""
        if key in self._final:
            return self._final[key]
        if key in self._busy:
            self._hits.add(key)
            return self._provisional.get(key, CLEAN)
        if len(self._busy) >= MAX_QUERY_DEPTH or self._steps >= MAX_STEPS:
            return self._anything  # too deep or too much to follow: assume the worst
        self._steps += 1
        self._busy.add(key)
        outer, leaned = self._hits, set()
        result = self._provisional.get(key, CLEAN)
        try:
            for _ in range(MAX_ROUNDS):
                self._hits = set()
                new = result | self._clamp(compute())
                leaned |= self._hits - {key}
                settled = key not in self._hits or new == result
                result = new
                if settled:
                    break
                self._provisional[key] = result
            else:
                result |= self._anything
        finally:
            self._busy.discard(key)
            self._hits = outer | leaned
        if leaned:
            self._provisional[key] = result
        else:
            self._final[key] = result
        return result

    def _clamp(self, taint: Taint) -> Taint:
        limit = self._limit
        return frozenset((r, min(max(d, -limit), limit), min(k, limit)) for r, d, k in taint)

    def changes_constant(self, taint: Taint) -> str | None:
        for root, depth, shared in sorted(taint):
            if shared == 0 and depth in self.mutable.get(root, ()):
                return root
        return None

    # ---- expressions ---------------------------------------------------------------------

    def expr(self, node: ast.AST | None) -> Taint:
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.Subscript):
            inner = self.expr(node.value)
            return _copy(inner) if isinstance(node.slice, ast.Slice) else _element(inner)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Await):
            return self.expr(node.value)
        if isinstance(node, ast.IfExp):
            return self.expr(node.body) | self.expr(node.orelse)
        if isinstance(node, ast.BoolOp):
            return _union(self.expr(v) for v in node.values)
        if isinstance(node, ast.BinOp):
            return _copy(self.expr(node.left) | self.expr(node.right))
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return _wrap(_union(self._item(e) for e in node.elts))
        if isinstance(node, ast.Dict):
            return _wrap(_union(self._item(v) if k is not None else _element(self.expr(v))
                                for k, v in zip(node.keys, node.values, strict=True)))
        if isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp):
            return _wrap(self.expr(node.elt))
        if isinstance(node, ast.DictComp):
            return _wrap(self.expr(node.value))
        return CLEAN

    def _item(self, node: ast.expr) -> Taint:
        if isinstance(node, ast.Starred):
            return _element(self.expr(node.value))
        return self.expr(node)

    def _call(self, node: ast.Call) -> Taint:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr in _ELEMENT_METHODS:
                return _element(self.expr(func.value))
            if func.attr in _COPY_METHODS:
                return _copy(self.expr(func.value))
            return CLEAN
        builtin = self.m.builtin_name(func)
        if builtin in _COPY_BUILTINS and node.args:
            return _copy(self.expr(node.args[0]))
        if builtin in ("min", "max") and node.args:
            args = _union(self.expr(a) for a in node.args)
            return _element(args) if len(node.args) == 1 else args
        target = self.m.function_def(func)
        if target is not None:
            return self._function_result(target)
        return CLEAN

    def _function_result(self, func: ast.AST) -> Taint:
        values = self._return_values.get(id(func), [])
        return self._fixpoint(("return", id(func)),
                              lambda: _union(self.expr(v) for v in values))

    # ---- names ---------------------------------------------------------------------------

    def name(self, node: ast.Name) -> Taint:
        owner, bindings = self.m.bindings_of(node.id, node)
        if owner is None:
            return CLEAN
        if owner is self.m.module:
            return frozenset({(node.id, 0, 0)}) if node.id in self.mutable else CLEAN
        return self._fixpoint(("name", id(owner), node.id),
                              lambda: _union(self._binding(owner, b) for b in bindings))

    def _binding(self, owner: Scope, binding: Binding) -> Taint:
        if binding.kind == "assign":
            return self._path(binding.value, binding.path)
        if binding.kind == "augassign":
            return _copy(self.expr(binding.value))
        if binding.kind in ("for", "comp"):
            return self._loop_variable(binding.value, binding.path)
        if binding.kind == "param":
            return self._param(binding)
        return CLEAN

    def _path(self, value: ast.AST | None, path: tuple[int, ...]) -> Taint:
        for i, step in enumerate(path):
            if (isinstance(value, ast.Tuple | ast.List) and 0 <= step < len(value.elts)
                    and not any(isinstance(e, ast.Starred) for e in value.elts)):
                value = value.elts[step]
                continue
            taint = self.expr(value)
            for _ in path[i:]:
                taint = _element(taint)
            return taint
        return self.expr(value)

    def _loop_variable(self, iterable: ast.AST | None, path: tuple[int, ...]) -> Taint:
        """Elements of the iterable; enumerate indices and dict keys are never shared."""
        if isinstance(iterable, ast.Call) and path:
            func, args = iterable.func, iterable.args
            builtin = self.m.builtin_name(func)
            if builtin == "enumerate" and args:
                return CLEAN if path[0] == 0 else self._path_of(args[0], path[1:])
            if builtin == "zip" and 0 <= path[0] < len(args):
                return self._path_of(args[path[0]], path[1:])
            if isinstance(func, ast.Attribute) and func.attr == "items":
                return CLEAN if path[0] == 0 else self._path_of(func.value, path[1:])
        return self._path_of(iterable, path)

    def _path_of(self, iterable: ast.AST | None, rest: tuple[int, ...]) -> Taint:
        taint = _element(self.expr(iterable))
        for _ in rest:
            taint = _element(taint)
        return taint

    def _param(self, binding: Binding) -> Taint:
        func = binding.node
        if not isinstance(func, FUNCTION_TYPES):
            return CLEAN
        positional = [*func.args.posonlyargs, *func.args.args]
        name = positional[binding.index].arg if binding.index < len(positional) else None
        found: list[Taint] = []
        for call in self.m.calls_to(func):
            for i, arg in enumerate(call.args):
                if i == binding.index or isinstance(arg, ast.Starred):
                    found.append(self._item(arg))
            for kw in call.keywords:
                if kw.arg is None or kw.arg == name:
                    found.append(self.expr(kw.value))
        if id(func) in self.m.escaped_functions:
            found.append(self._runtime_argument())
        return _union(found)

    def _runtime_argument(self) -> Taint:
        """What the runtime may pass to a function handed over as a value: the initial
        value of a ctx.pipeline or another stage's result, or (ctx.dag) a fresh dict of
        other nodes' results. Followed for every such function alike (conservative)."""
        return self._fixpoint(("runtime",), self._runtime_values)

    def _runtime_values(self) -> Taint:
        found: list[Taint] = []
        for call in self.m.buckets.get(ast.Call, ()):
            func = call.func
            if not (isinstance(func, ast.Attribute) and func.attr in ("pipeline", "dag")
                    and self.m.is_ctx(func.value)):
                continue
            if func.attr == "pipeline" and len(call.args) > 1:
                found.append(self.expr(call.args[1]))
            results = _union(self._function_result(f) for f in self._functions_in(call))
            found.append(_wrap(results) if func.attr == "dag" else results)
        return _union(found)

    def _functions_in(self, call: ast.Call) -> list[ast.AST]:
        """Script functions named anywhere in a ctx.pipeline / ctx.dag argument."""
        found: list[ast.AST] = []
        stack: list[ast.AST] = list(call.args[:1])
        while stack:
            node = stack.pop()
            target = self.m.function_def(node)
            if target is not None:
                found.append(target)
            elif isinstance(node, ast.List | ast.Tuple | ast.Set):
                stack.extend(node.elts)
            elif isinstance(node, ast.Dict):
                stack.extend(node.values)
        return found


# ---- the rule ------------------------------------------------------------------------------

def check_module_state(an: Analysis) -> Iterator[Violation]:
    mutable = {name: depths for name, value in an.model.env.items()
               if (depths := mutable_depths(value))}
    if not mutable:
        return
    taints = Taints(an.model, mutable)
    for target, site in _mutation_sites(an):
        root = taints.changes_constant(taints.expr(target))
        if root is not None:
            yield _violation(site, target, root)
    for aug in an.nodes(ast.AugAssign):
        if isinstance(aug.target, ast.Name) and _augments_constant(an.model, aug.target):
            yield _violation(aug, aug.target, aug.target.id)


def _mutation_sites(an: Analysis) -> Iterator[tuple[ast.expr, ast.AST]]:
    """(the object that changes, the node to report) for every in-place change."""
    for call in an.nodes(ast.Call):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr in STATE_MUTATORS:
            yield func.value, call
    for sub in an.nodes(ast.Subscript):
        if not isinstance(sub.ctx, ast.Load):
            yield sub.value, sub
    for aug in an.nodes(ast.AugAssign):
        if isinstance(aug.target, ast.Name):
            yield aug.target, aug


def _augments_constant(model: ScriptModel, name: ast.Name) -> bool:
    """``CONST += [...]`` inside a function (Python would make it an unbound local)."""
    owner, bindings = model.bindings_of(name.id, name)
    return (owner is not None and owner is not model.module
            and all(b.kind == "augassign" for b in bindings)
            and name.id in model.module.bindings)


def _violation(site: ast.AST, target: ast.AST, root: str) -> Violation:
    return Analysis.violation(
        "R11", site, f"this changes the top-level constant {root} (through "
        f"{snippet(target, 40)}); module-level values must never change",
        f"copy it first and change the copy: items = list({root}) or "
        f"settings = dict({root}) (copy a nested part the same way), or build the value "
        "inside orchestrate")

"""The one walk over a parsed script. Every rule reads what it records; none walks again.

For each node it records the parent, the scope and the bucket of its node type; along the
way it binds names, notes enclosing loops and collection mutations, and enforces the R00
tree limits (node count and depth) *before* going deeper, so the recursion is bounded by
``MAX_AST_DEPTH`` whatever the parser accepted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from .bindings import (
    FUNCTION_TYPES,
    Binding,
    FunctionNode,
    Loop,
    Mutation,
    Scope,
    all_params,
    target_names,
)
from .builtins import MUTATING_METHODS
from .consts import NOT_CONSTANT, fold_quiet

MAX_AST_NODES = 50_000
MAX_AST_DEPTH = 100

# Fields that never hold a node worth a visit: identifiers, flags, and the shared
# load/store/operator markers (not counted as syntax nodes).
_SKIPPED_FIELDS = frozenset({
    "ctx", "op", "ops", "id", "attr", "arg", "name", "kind", "type_comment", "conversion",
    "is_async", "level", "module", "asname", "simple", "tag", "rest",
})


def _node_classes(root: type = ast.AST) -> list[type]:
    found = [root]
    sub: type
    for sub in root.__subclasses__():
        found.extend(_node_classes(sub))
    return found


# Child fields per node class, computed once (Constant.value is data, never a node).
_FIELDS: dict[type, tuple[str, ...]] = {
    cls: tuple(f for f in getattr(cls, "_fields", ()) if f not in _SKIPPED_FIELDS)
    for cls in _node_classes()}
_FIELDS[ast.Constant] = ()


def child_fields(cls: type) -> tuple[str, ...]:
    fields = _FIELDS.get(cls)
    if fields is None:
        fields = _FIELDS[cls] = tuple(
            f for f in getattr(cls, "_fields", ()) if f not in _SKIPPED_FIELDS)
    return fields


class TreeTooLarge(Exception):
    """The parsed tree exceeds the R00 node-count or depth limit."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


Loops = tuple[Loop, ...]


class Walked:
    """What the one walk records about a parsed script; the script model (``scope.py``)
    answers its questions from this."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.module = Scope(tree, "module", None)
        self.scope_by_node: dict[int, Scope] = {}
        self.loops_by_node: dict[int, Loops] = {}
        self.function_scopes: dict[int, Scope] = {}
        self.functions: list[FunctionNode] = []
        self.mutations: list[Mutation] = []
        self.env: dict[str, Any] = {}
        self.orchestrate: ast.AsyncFunctionDef | None = None
        self.parents: dict[int, ast.AST | None] = {}
        self.buckets: defaultdict[type, list[Any]] = defaultdict(list)
        Builder(self).build()  # raises TreeTooLarge past the R00 tree limits


class Builder:
    """Records parents, scopes, buckets, bindings, loops and mutations in one walk."""

    def __init__(self, model: Walked) -> None:
        self.m = model
        self.parents = model.parents
        self.scopes = model.scope_by_node
        self.buckets = model.buckets

    def build(self) -> None:
        for stmt in self.m.tree.body:
            self._constant(stmt)
        self.visit(self.m.tree, self.m.module, (), None, 0)
        # Counted after the walk: it is linear, and the parser has already built them all.
        if len(self.parents) > MAX_AST_NODES:
            raise TreeTooLarge(1, f"script has more than {MAX_AST_NODES} syntax nodes")

    def _constant(self, stmt: ast.stmt) -> None:
        """Top-level ``NAME = <constant>``: folded into the environment, in order."""
        value: ast.expr | None
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            targets, value = [t.id for t in stmt.targets if isinstance(t, ast.Name)], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            targets, value = [stmt.target.id], stmt.value
        else:
            return
        folded = NOT_CONSTANT if value is None else fold_quiet(value, self.m.env)
        for name in targets:
            if folded is NOT_CONSTANT:
                self.m.env.pop(name, None)
            else:
                self.m.env[name] = folded

    # ---- the walk ------------------------------------------------------------------------

    def record(self, node: ast.AST, parent: ast.AST | None, scope: Scope, depth: int) -> None:
        if depth > MAX_AST_DEPTH:
            raise TreeTooLarge(getattr(node, "lineno", 1),
                               f"expressions nest deeper than {MAX_AST_DEPTH} levels")
        key = id(node)
        self.parents[key] = parent
        self.scopes[key] = scope
        self.buckets[type(node)].append(node)

    def visit(self, node: ast.AST, scope: Scope, loops: Loops, parent: ast.AST | None,
              depth: int) -> None:
        self.record(node, parent, scope, depth)
        kind = type(node)
        handler = _HANDLERS.get(kind)
        if handler is not None:
            handler(self, node, scope, loops, depth)
        elif _FIELDS[kind]:
            self.children(node, scope, loops, depth)

    def children(self, node: ast.AST, scope: Scope, loops: Loops, depth: int) -> None:
        """Visit the children of a node that binds nothing (the common case), inline."""
        depth += 1
        if depth > MAX_AST_DEPTH:
            raise TreeTooLarge(getattr(node, "lineno", 1),
                               f"expressions nest deeper than {MAX_AST_DEPTH} levels")
        parents, scopes, buckets, fields = self.parents, self.scopes, self.buckets, _FIELDS
        for name in fields[type(node)]:
            value = getattr(node, name)
            if type(value) is not list:
                if value is None or type(value) is str:
                    continue
                value = (value,)
            for child in value:
                if not isinstance(child, ast.AST):
                    continue
                key = id(child)
                parents[key] = node
                scopes[key] = scope
                kind = type(child)
                buckets[kind].append(child)
                handler = _HANDLERS.get(kind)
                if handler is not None:
                    handler(self, child, scope, loops, depth)
                elif fields[kind]:
                    self.children(child, scope, loops, depth)

    def _bind_target(self, target: ast.AST, scope: Scope, kind: str, value: ast.AST | None,
                     loops: Loops, stmt: ast.AST) -> None:
        for name, path in target_names(target):
            scope.bind(name.id, Binding(kind, stmt, value, path, loops))
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.m.mutations.append(
                Mutation(target.value.id, "[]=", stmt, None, loops, scope))

    # ---- scopes --------------------------------------------------------------------------

    def _function(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        scope.bind(node.name, Binding("def", node, loops=loops))
        self.m.functions.append(node)
        if (scope is self.m.module and node.name == "orchestrate"
                and isinstance(node, ast.AsyncFunctionDef) and self.m.orchestrate is None):
            self.m.orchestrate = node
        inner = Scope(node, "function", scope)
        self.m.function_scopes[id(node)] = inner
        d = depth + 1
        for decorator in node.decorator_list:
            self.visit(decorator, scope, loops, node, d)
        self._arguments(node, scope, inner, loops, d)
        if node.returns is not None:
            self.visit(node.returns, scope, loops, node, d)
        for stmt in node.body:
            self.visit(stmt, inner, (), node, d)

    def _arguments(self, owner: Any, outer: Scope, inner: Scope, loops: Loops,
                   depth: int) -> None:
        """Parameters bind in the function's scope; defaults and annotations run outside."""
        args = owner.args
        self.record(args, owner, inner, depth)
        d = depth + 1
        for i, param in enumerate(all_params(owner)):
            inner.bind(param.arg, Binding("param", owner, index=i))
            self.record(param, args, inner, d)
            if param.annotation is not None:
                self.visit(param.annotation, outer, loops, param, d + 1)
        for default in [*args.defaults, *(k for k in args.kw_defaults if k is not None)]:
            self.visit(default, outer, loops, args, d)

    def _lambda(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        inner = Scope(node, "lambda", scope)
        self._arguments(node, scope, inner, loops, depth + 1)
        self.visit(node.body, inner, (), node, depth + 1)

    def _class(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        scope.bind(node.name, Binding("other", node))
        self.children(node, scope, loops, depth)

    def _comprehension(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        inner = Scope(node, "comprehension", scope)
        current = scope
        d = depth + 1
        for gen in node.generators:
            self.record(gen, node, current, d)
            self.m.loops_by_node[id(gen)] = loops
            self.visit(gen.iter, current, loops, gen, d + 1)
            current = inner
            self._bind_target(gen.target, inner, "comp", gen.iter, loops, gen)
            self.visit(gen.target, inner, loops, gen, d + 1)
            loops = (*loops, gen.iter)
            for cond in gen.ifs:
                self.visit(cond, inner, loops, gen, d + 1)
        for part in ("elt", "key", "value"):
            child = getattr(node, part, None)
            if child is not None:
                self.visit(child, inner, loops, node, d)

    # ---- statements ----------------------------------------------------------------------

    def _for(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        self.m.loops_by_node[id(node)] = loops
        d = depth + 1
        self.visit(node.iter, scope, loops, node, d)
        self._bind_target(node.target, scope, "for", node.iter, loops, node)
        self.visit(node.target, scope, loops, node, d)
        inner = (*loops, None if isinstance(node, ast.AsyncFor) else node.iter)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt, scope, inner, node, d)

    def _while(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        self.visit(node.test, scope, loops, node, depth + 1)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt, scope, (*loops, None), node, depth + 1)

    def _assign(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if node.value is not None else [])
        for target in targets:
            self._bind_target(target, scope, "assign", node.value, loops, node)
        self.children(node, scope, loops, depth)

    def _augassign(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        if isinstance(node.target, ast.Name):
            scope.bind(node.target.id, Binding("augassign", node, node.value, (), loops))
        self.children(node, scope, loops, depth)

    def _named(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        owner = scope.function or scope
        owner.bind(node.target.id, Binding("assign", node, node.value, (), loops))
        self.children(node, scope, loops, depth)

    def _except(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        if node.name:
            scope.bind(node.name, Binding("except", node))
        self.children(node, scope, loops, depth)

    def _import(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        for alias in node.names:
            scope.bind((alias.asname or alias.name).split(".")[0], Binding("import", node))
        self.children(node, scope, loops, depth)

    def _withitem(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, scope, "other", None, loops, node)
        self.children(node, scope, loops, depth)

    def _match_name(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        name = node.rest if isinstance(node, ast.MatchMapping) else node.name
        if name:
            scope.bind(name, Binding("other", node))
        self.children(node, scope, loops, depth)

    def _call(self, node: Any, scope: Scope, loops: Loops, depth: int) -> None:
        func = node.func
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.attr in MUTATING_METHODS):
            arg = node.args[-1] if node.args else None
            self.m.mutations.append(Mutation(func.value.id, func.attr, node, arg, loops, scope))
        self.children(node, scope, loops, depth)


_Handler = Callable[[Builder, Any, Scope, Loops, int], None]
_HANDLERS: dict[type, _Handler] = {
    **dict.fromkeys(FUNCTION_TYPES, Builder._function),
    ast.Lambda: Builder._lambda, ast.ClassDef: Builder._class,
    **dict.fromkeys((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp),
                    Builder._comprehension),
    ast.For: Builder._for, ast.AsyncFor: Builder._for, ast.While: Builder._while,
    ast.Assign: Builder._assign, ast.AnnAssign: Builder._assign,
    ast.AugAssign: Builder._augassign, ast.NamedExpr: Builder._named,
    ast.ExceptHandler: Builder._except, ast.Import: Builder._import,
    ast.ImportFrom: Builder._import, ast.withitem: Builder._withitem,
    ast.MatchAs: Builder._match_name, ast.MatchStar: Builder._match_name,
    ast.MatchMapping: Builder._match_name, ast.Call: Builder._call,
}

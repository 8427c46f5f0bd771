"""The script model every rule reads: scopes, name bindings, functions and ctx parameters.

Built in one walk over a tree whose depth R00 has already capped, so recursion here is
bounded. Binding analysis is flow-insensitive on purpose: a name is described by *all*
of its bindings, which is what a static bound or a "may this be ctx?" question needs.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from .builtins import GROW_MANY_METHODS, GROW_ONE_METHODS, MUTATING_METHODS
from .consts import NOT_CONSTANT, fold_quiet

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# An enclosing loop: the iterable it runs over (None for `while`), evaluated in its own scope.
Loop = ast.expr | None


@dataclass(eq=False)
class Scope:
    node: ast.AST
    kind: str  # "module" | "function" | "comprehension" | "lambda"
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)

    def bind(self, name: str, binding: Binding) -> None:
        self.bindings.setdefault(name, []).append(binding)

    @property
    def function(self) -> Scope | None:
        """The nearest function (or module) scope: comprehensions are transparent."""
        scope: Scope | None = self
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        return scope


@dataclass(frozen=True, eq=False)
class Binding:
    kind: str  # param | assign | augassign | for | comp | except | def | import | other
    node: ast.AST
    value: ast.AST | None = None
    path: tuple[int, ...] = ()
    loops: tuple[Loop, ...] = ()
    index: int = -1  # parameter position


@dataclass(frozen=True, eq=False)
class Mutation:
    name: str
    method: str  # list/dict method name, or "[]=" for a subscript store
    call: ast.AST
    arg: ast.expr | None
    loops: tuple[Loop, ...]
    scope: Scope

    @property
    def grows_by_one(self) -> bool:
        return self.method in GROW_ONE_METHODS or self.method == "[]="

    @property
    def grows_by_many(self) -> bool:
        return self.method in GROW_MANY_METHODS


def _target_names(target: ast.AST, path: tuple[int, ...] = ()):
    """Yield (Name node, unpack path) for every name an assignment target binds."""
    if isinstance(target, ast.Name):
        yield target, path
    elif isinstance(target, ast.Tuple | ast.List):
        for i, elt in enumerate(target.elts):
            yield from _target_names(elt, (*path, i))
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value, (*path, -1))


def positional_params(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    return [*node.args.posonlyargs, *node.args.args]


def all_params(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    a = node.args
    extra = [p for p in (a.vararg, a.kwarg) if p is not None]
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *extra]


class ScriptModel:
    """Scopes and bindings of one parsed script."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.module = Scope(tree, "module", None)
        self.scope_by_node: dict[int, Scope] = {}
        self.loops_by_node: dict[int, tuple[Loop, ...]] = {}
        self.function_scopes: dict[int, Scope] = {}
        self.functions: list[FunctionNode] = []
        self.mutations: list[Mutation] = []
        self.env: dict[str, Any] = {}
        self.orchestrate: ast.AsyncFunctionDef | None = None
        self.parent_call: dict[int, ast.Call] = {}  # id(func expr) -> the Call using it
        _Builder(self).build()
        self._resolve_mutations()
        self.ctx_params: dict[int, set[str]] = {}
        self._find_ctx_params()

    # ---- lookups -----------------------------------------------------------------------

    def scope_of(self, node: ast.AST) -> Scope:
        return self.scope_by_node.get(id(node), self.module)

    def loops_of(self, node: ast.AST) -> tuple[Loop, ...]:
        return self.loops_by_node.get(id(node), ())

    def resolve(self, name: str, scope: Scope) -> Scope | None:
        current: Scope | None = scope
        while current is not None:
            if name in current.bindings:
                return current
            current = current.parent
        return None

    def bindings_of(self, name: str, node: ast.AST) -> tuple[Scope | None, list[Binding]]:
        owner = self.resolve(name, self.scope_of(node))
        return owner, (owner.bindings[name] if owner is not None else [])

    def function_def(self, name_node: ast.AST) -> FunctionNode | None:
        """The script function a Name refers to, when that is its only binding."""
        if not isinstance(name_node, ast.Name):
            return None
        _, bindings = self.bindings_of(name_node.id, name_node)
        defs = [b.node for b in bindings if b.kind == "def"]
        if len(defs) == 1 and len(bindings) == 1:
            node = defs[0]
            return node if isinstance(node, FunctionNode) else None
        return None

    def is_ctx(self, node: ast.AST) -> bool:
        """Does this Name refer to a context parameter?"""
        if not isinstance(node, ast.Name):
            return False
        owner, bindings = self.bindings_of(node.id, node)
        if owner is None or owner.kind != "function":
            return False
        ctx = self.ctx_params.get(id(owner.node), set())
        return node.id in ctx and any(b.kind == "param" for b in bindings)

    def ctx_name(self) -> str:
        if self.orchestrate is not None:
            params = positional_params(self.orchestrate)
            if params:
                return params[0].arg
        return "ctx"

    def is_builtin_ref(self, node: ast.AST, name: str) -> bool:
        """A Name that refers to the builtin ``name`` (not shadowed by the script)."""
        return (isinstance(node, ast.Name) and node.id == name
                and self.resolve(name, self.scope_of(node)) is None)

    # ---- derived facts -----------------------------------------------------------------

    def _resolve_mutations(self) -> None:
        self.mutations_by_owner: dict[tuple[int, str], list[Mutation]] = {}
        self.closure_mutated: set[tuple[int, str]] = set()
        self.mutating_functions: set[int] = set()  # functions that grow a parameter
        for mutation in self.mutations:
            owner = self.resolve(mutation.name, mutation.scope)
            if owner is None:
                continue
            key = (id(owner), mutation.name)
            self.mutations_by_owner.setdefault(key, []).append(mutation)
            if owner is not mutation.scope.function:
                self.closure_mutated.add(key)
            if any(b.kind == "param" for b in owner.bindings[mutation.name]):
                self.mutating_functions.add(id(owner.node))

    def calls_to(self, func: FunctionNode) -> list[ast.Call]:
        return self.call_sites.get(id(func), [])

    def _find_ctx_params(self) -> None:
        self.call_sites: dict[int, list[ast.Call]] = {}
        self.escaped_functions: set[int] = set()
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                func = self.function_def(node)
                if func is None:
                    continue
                call = self.parent_call.get(id(node))
                if call is not None:
                    self.call_sites.setdefault(id(func), []).append(call)
                else:
                    self.escaped_functions.add(id(func))
        names = {"ctx", self.ctx_name()}
        for func in self.functions:
            self.ctx_params[id(func)] = {p.arg for p in all_params(func) if p.arg in names}
        if self.orchestrate is not None and positional_params(self.orchestrate):
            self.ctx_params[id(self.orchestrate)].add(self.ctx_name())
        changed = True
        while changed:
            changed = False
            for func in self.functions:
                for param in self._ctx_args_of(func):
                    if param not in self.ctx_params[id(func)]:
                        self.ctx_params[id(func)].add(param)
                        changed = True

    def _ctx_args_of(self, func: FunctionNode) -> set[str]:
        """Parameters of ``func`` that some call site fills with a ctx name."""
        found: set[str] = set()
        params = positional_params(func)
        for call in self.calls_to(func):
            for i, arg in enumerate(call.args):
                if i < len(params) and self.is_ctx(arg):
                    found.add(params[i].arg)
            for kw in call.keywords:
                if kw.arg is not None and self.is_ctx(kw.value):
                    found.add(kw.arg)
        return found


class _Builder:
    """One walk that records scopes, bindings, loops and mutations."""

    def __init__(self, model: ScriptModel) -> None:
        self.m = model

    def build(self) -> None:
        for stmt in self.m.tree.body:
            self._constant(stmt)
        self.visit(self.m.tree, self.m.module, ())

    def _constant(self, stmt: ast.stmt) -> None:
        """Top-level ``NAME = <constant>``: folded into the environment, in order."""
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

    def visit(self, node: ast.AST, scope: Scope, loops: tuple[Loop, ...]) -> None:
        self.m.scope_by_node[id(node)] = scope
        handler = getattr(self, f"_visit_{type(node).__name__}", None)
        if handler is not None:
            handler(node, scope, loops)
            return
        self._children(node, scope, loops)

    def _children(self, node: ast.AST, scope: Scope, loops: tuple[Loop, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            self.visit(child, scope, loops)

    def _bind_target(self, target: ast.AST, scope: Scope, kind: str, value: ast.AST | None,
                     loops: tuple[Loop, ...], stmt: ast.AST) -> None:
        for name, path in _target_names(target):
            scope.bind(name.id, Binding(kind, stmt, value, path, loops))
        if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.m.mutations.append(
                Mutation(target.value.id, "[]=", stmt, None, loops, scope))

    # ---- scopes ------------------------------------------------------------------------

    def _visit_FunctionDef(self, node: FunctionNode, scope: Scope, loops) -> None:
        scope.bind(node.name, Binding("def", node, loops=loops))
        self.m.functions.append(node)
        if (scope is self.m.module and node.name == "orchestrate"
                and isinstance(node, ast.AsyncFunctionDef) and self.m.orchestrate is None):
            self.m.orchestrate = node
        for outer in [*node.decorator_list, *node.args.defaults,
                      *[d for d in node.args.kw_defaults if d is not None]]:
            self.visit(outer, scope, loops)
        inner = Scope(node, "function", scope)
        self.m.function_scopes[id(node)] = inner
        for i, param in enumerate(all_params(node)):
            inner.bind(param.arg, Binding("param", node, index=i))
            self.m.scope_by_node[id(param)] = inner
        for stmt in node.body:
            self.visit(stmt, inner, ())

    _visit_AsyncFunctionDef = _visit_FunctionDef

    def _visit_Lambda(self, node: ast.Lambda, scope: Scope, loops) -> None:
        inner = Scope(node, "lambda", scope)
        for i, param in enumerate(all_params(node)):
            inner.bind(param.arg, Binding("param", node, index=i))
        for default in node.args.defaults:
            self.visit(default, scope, loops)
        self.visit(node.body, inner, ())

    def _visit_ClassDef(self, node: ast.ClassDef, scope: Scope, loops) -> None:
        scope.bind(node.name, Binding("other", node))
        self._children(node, scope, loops)

    def _comprehension(self, node: Any, scope: Scope, loops) -> None:
        inner = Scope(node, "comprehension", scope)
        current = scope
        for gen in node.generators:
            self.visit(gen.iter, current, loops)
            self.m.loops_by_node[id(gen)] = loops
            self.m.scope_by_node[id(gen)] = current
            current = inner
            self._bind_target(gen.target, inner, "comp", gen.iter, loops, gen)
            self.visit(gen.target, inner, loops)
            loops = (*loops, gen.iter)
            for cond in gen.ifs:
                self.visit(cond, inner, loops)
        for part in ("elt", "key", "value"):
            if hasattr(node, part):
                self.visit(getattr(node, part), inner, loops)

    _visit_ListComp = _visit_SetComp = _visit_DictComp = _visit_GeneratorExp = _comprehension

    # ---- statements --------------------------------------------------------------------

    def _visit_For(self, node: ast.For | ast.AsyncFor, scope: Scope, loops) -> None:
        self.m.loops_by_node[id(node)] = loops
        self.visit(node.iter, scope, loops)
        self._bind_target(node.target, scope, "for", node.iter, loops, node)
        self.visit(node.target, scope, loops)
        inner = (*loops, None if isinstance(node, ast.AsyncFor) else node.iter)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt, scope, inner)

    _visit_AsyncFor = _visit_For

    def _visit_While(self, node: ast.While, scope: Scope, loops) -> None:
        self.visit(node.test, scope, loops)
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt, scope, (*loops, None))

    def _visit_Assign(self, node: ast.Assign, scope: Scope, loops) -> None:
        for target in node.targets:
            self._bind_target(target, scope, "assign", node.value, loops, node)
        self._children(node, scope, loops)

    def _visit_AnnAssign(self, node: ast.AnnAssign, scope: Scope, loops) -> None:
        if node.value is not None:
            self._bind_target(node.target, scope, "assign", node.value, loops, node)
        self._children(node, scope, loops)

    def _visit_AugAssign(self, node: ast.AugAssign, scope: Scope, loops) -> None:
        if isinstance(node.target, ast.Name):
            scope.bind(node.target.id, Binding("augassign", node, node.value, (), loops))
        self._children(node, scope, loops)

    def _visit_NamedExpr(self, node: ast.NamedExpr, scope: Scope, loops) -> None:
        owner = scope.function or scope
        owner.bind(node.target.id, Binding("assign", node, node.value, (), loops))
        self._children(node, scope, loops)

    def _visit_ExceptHandler(self, node: ast.ExceptHandler, scope: Scope, loops) -> None:
        if node.name:
            scope.bind(node.name, Binding("except", node))
        self._children(node, scope, loops)

    def _visit_Import(self, node: ast.Import | ast.ImportFrom, scope: Scope, loops) -> None:
        for alias in node.names:
            name = (alias.asname or alias.name).split(".")[0]
            scope.bind(name, Binding("import", node))

    _visit_ImportFrom = _visit_Import

    def _visit_withitem(self, node: ast.withitem, scope: Scope, loops) -> None:
        if node.optional_vars is not None:
            self._bind_target(node.optional_vars, scope, "other", None, loops, node)
        self._children(node, scope, loops)

    def _visit_MatchAs(self, node: Any, scope: Scope, loops) -> None:
        if getattr(node, "name", None):
            scope.bind(node.name, Binding("other", node))
        self._children(node, scope, loops)

    _visit_MatchStar = _visit_MatchAs

    def _visit_MatchMapping(self, node: ast.MatchMapping, scope: Scope, loops) -> None:
        if node.rest:
            scope.bind(node.rest, Binding("other", node))
        self._children(node, scope, loops)

    def _visit_Call(self, node: ast.Call, scope: Scope, loops) -> None:
        self.m.parent_call[id(node.func)] = node
        func = node.func
        if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                and func.attr in MUTATING_METHODS):
            arg = node.args[-1] if node.args else None
            self.m.mutations.append(Mutation(func.value.id, func.attr, node, arg, loops, scope))
        self._children(node, scope, loops)

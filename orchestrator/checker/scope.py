"""The script model every rule reads: scopes, name bindings, functions and ctx parameters.

Built by the one walk in ``walk.py`` (which also records parents and node buckets).
Binding analysis is flow-insensitive on purpose: a name is described by *all* of its
bindings, which is what a static bound or a "may this be ctx?" question needs.
"""

from __future__ import annotations

import ast
from functools import cached_property

from .bindings import (
    COMPREHENSIONS,
    FUNCTION_TYPES,
    Binding,
    FunctionNode,
    Loop,
    Mutation,
    Scope,
    all_params,
    positional_params,
    target_names,
)
from .walk import Walked

__all__ = ["COMPREHENSIONS", "FUNCTION_TYPES", "Binding", "FunctionNode", "Loop", "Mutation",
           "Scope", "ScriptModel", "all_params", "positional_params"]


class ScriptModel(Walked):
    """Scopes and bindings of one parsed script."""

    def __init__(self, tree: ast.Module) -> None:
        super().__init__(tree)  # the one walk; raises walk.TreeTooLarge past the R00 limits
        self.function_names = frozenset(f.name for f in self.functions)
        self.names: list[ast.Name] = self.buckets[ast.Name]
        self.owners: dict[int, Scope | None] = {
            id(n): self.resolve(n.id, self.scope_by_node[id(n)]) for n in self.names}
        # Names read but bound nowhere in the script: builtins, or undefined (R04/R07).
        self.free_names: list[ast.Name] = [
            n for n in self.names if self.owners[id(n)] is None and type(n.ctx) is ast.Load]
        self._resolve_mutations()
        self.ctx_params: dict[int, set[str]] = {}
        self._ctx_nodes: set[int] | None = None
        self.ctx_name_nodes: list[ast.Name] = []
        self._find_ctx_params()
        self.ctx_name_nodes = [n for n in self.names
                               if n.id in self._known_ctx_names and self._is_ctx_name(n)]
        self._ctx_nodes = {id(n) for n in self.ctx_name_nodes}

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

    def owner_of(self, name: ast.Name) -> Scope | None:
        """The scope that binds this Name (None: a builtin or an undefined name)."""
        key = id(name)
        if key in self.owners:
            return self.owners[key]
        return self.resolve(name.id, self.scope_of(name))

    def bindings_of(self, name: str, node: ast.AST) -> tuple[Scope | None, list[Binding]]:
        if isinstance(node, ast.Name) and node.id == name:
            owner = self.owner_of(node)
        else:
            owner = self.resolve(name, self.scope_of(node))
        return owner, (owner.bindings[name] if owner is not None else [])

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def call_of(self, func: ast.AST) -> ast.Call | None:
        """The Call whose callee is ``func``."""
        call = self.parents.get(id(func))
        return call if isinstance(call, ast.Call) and call.func is func else None

    def function_def(self, name_node: ast.AST) -> FunctionNode | None:
        """The script function a Name refers to, when that is its only binding."""
        if not isinstance(name_node, ast.Name) or name_node.id not in self.function_names:
            return None
        _, bindings = self.bindings_of(name_node.id, name_node)
        defs = [b.node for b in bindings if b.kind == "def"]
        if len(defs) == 1 and len(bindings) == 1:
            node = defs[0]
            return node if isinstance(node, FUNCTION_TYPES) else None
        return None

    def is_ctx(self, node: ast.AST) -> bool:
        """Does this Name refer to a context parameter?"""
        if not isinstance(node, ast.Name):
            return False
        if self._ctx_nodes is not None and id(node) in self.owners:
            return id(node) in self._ctx_nodes
        return self._is_ctx_name(node)

    def _is_ctx_name(self, node: ast.Name) -> bool:
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
        return isinstance(node, ast.Name) and node.id == name and self.owner_of(node) is None

    def builtin_name(self, node: ast.AST) -> str | None:
        """The builtin a Name refers to (unshadowed), else None."""
        if isinstance(node, ast.Name) and self.owner_of(node) is None:
            return node.id
        return None

    @cached_property
    def callable_names(self) -> frozenset[str]:
        """Names that may refer to a script function: defs and plain aliases (f = helper)."""
        names = set(self.function_names)
        for node in [*self.buckets.get(ast.Assign, ()), *self.buckets.get(ast.AnnAssign, ())]:
            if isinstance(node.value, ast.Name):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n, _ in target_names(t))
        return frozenset(names)

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
        for node in self.names:
            if node.id in self.function_names and isinstance(node.ctx, ast.Load):
                func = self.function_def(node)
                if func is None:
                    continue
                call = self.call_of(node)
                if call is not None:
                    self.call_sites.setdefault(id(func), []).append(call)
                else:
                    self.escaped_functions.add(id(func))
        names = {"ctx", self.ctx_name()}
        for func in self.functions:
            self.ctx_params[id(func)] = {p.arg for p in all_params(func) if p.arg in names}
        if self.orchestrate is not None and positional_params(self.orchestrate):
            self.ctx_params[id(self.orchestrate)].add(self.ctx_name())
        self._known_ctx_names: set[str] = set().union(*self.ctx_params.values())
        changed = bool(self.call_sites)
        while changed:
            changed = False
            for func in self.functions:
                for param in self._ctx_args_of(func):
                    if param not in self.ctx_params[id(func)]:
                        self.ctx_params[id(func)].add(param)
                        self._known_ctx_names.add(param)
                        changed = True

    def _ctx_args_of(self, func: FunctionNode) -> set[str]:
        """Parameters of ``func`` that some call site fills with a ctx name."""
        found: set[str] = set()
        params = positional_params(func)
        known = self._known_ctx_names
        for call in self.calls_to(func):
            for i, arg in enumerate(call.args):
                if (i < len(params) and isinstance(arg, ast.Name) and arg.id in known
                        and self.is_ctx(arg)):
                    found.add(params[i].arg)
            for kw in call.keywords:
                value = kw.value
                if (kw.arg is not None and isinstance(value, ast.Name) and value.id in known
                        and self.is_ctx(value)):
                    found.add(kw.arg)
        return found

"""The script as a program of functions, and the counted calls in each (pure).

``Program`` binds every function definition to a qualified name and a scope and knows
which functions reach a capability call (``ctx.run`` / ``ctx.race``), directly or through
helpers; ``LocalSites`` numbers the counted calls inside each function (its local
sites, ``f/b1/.../#j``). ``orchestrator.sites`` chains them into sites from
``orchestrate`` down.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

SITE_METHODS = frozenset({"run", "race"})

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
BLOCK_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {
    ast.If: (("body", "if"), ("orelse", "else")),
    ast.For: (("body", "for"), ("orelse", "forelse")),
    ast.AsyncFor: (("body", "afor"), ("orelse", "aforelse")),
    ast.While: (("body", "while"), ("orelse", "whileelse")),
    ast.With: (("body", "with"),),
    ast.AsyncWith: (("body", "awith"),),
    ast.Try: (("body", "try"), ("orelse", "tryelse"), ("finalbody", "finally")),
    ast.TryStar: (("body", "try"), ("orelse", "tryelse"), ("finalbody", "finally")),
}


def is_site_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """``ctx.run(...)`` / ``ctx.race(...)`` on any receiver name (the checker pins it)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SITE_METHODS
        and isinstance(node.func.value, ast.Name)
    )


# ---- functions, scopes and which of them reach a capability call ---------------------------


@dataclass
class _Scope:
    parent: _Scope | None
    bindings: dict[str, list[Function]] = field(default_factory=dict)

    def resolve(self, name: str) -> list[Function]:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.bindings:
                return scope.bindings[name]
            scope = scope.parent
        return []


@dataclass
class Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    inner: _Scope  # the names bound inside the function's body


class Program:
    """Functions by qualified name, name resolution, and the effectful ones."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: list[Function] = []
        self._collect(tree.body, _Scope(None), "")
        self.effectful = self._effectful()

    def _collect(self, stmts: list[ast.stmt], scope: _Scope, owner: str) -> None:
        """Bind every def in ``stmts`` (at any block depth, not inside other defs)."""
        seen: dict[str, int] = {}
        for stmt, block in _statements_with_blocks(stmts, ""):
            if not isinstance(stmt, FUNCTIONS):
                continue
            base = stmt.name if not owner else (
                f"{owner}.{stmt.name}" if not block else f"{owner}/{block}.{stmt.name}")
            seen[base] = seen.get(base, 0) + 1
            qualname = base if seen[base] == 1 else f"{base}~{seen[base]}"
            function = Function(stmt, qualname, _Scope(scope))
            self.functions.append(function)
            scope.bindings.setdefault(stmt.name, []).append(function)
            self._collect(stmt.body, function.inner, qualname)

    def callees(self, function: Function, name: str) -> list[Function]:
        return function.inner.resolve(name)

    def _effectful(self) -> set[int]:
        """Functions (by node id) that reach a capability call, directly or through helpers."""
        found = {id(f.node) for f in self.functions
                 if any(is_site_call(n) for n in _own_nodes(f.node))}
        changed = True
        while changed:
            changed = False
            for function in self.functions:
                if id(function.node) in found:
                    continue
                if any(id(t.node) in found for _, targets in self.references(function)
                       for t in targets):
                    found.add(id(function.node))
                    changed = True
        return found

    def references(self, function: Function) -> Iterator[tuple[ast.Name, list[Function]]]:
        """Names in ``function``'s own body that resolve to script functions."""
        for node in _own_nodes(function.node):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                targets = function.inner.resolve(node.id)
                if targets:
                    yield node, targets

    def is_effectful(self, function: Function) -> bool:
        return id(function.node) in self.effectful


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function's body, not descending into nested functions."""
    stack: list[ast.AST] = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def _statements_with_blocks(stmts: list[ast.stmt], where: str
                            ) -> Iterator[tuple[ast.stmt, str]]:
    """Statements at any block depth (not inside defs), with their block path.

    Only compound statements that hold a definition are numbered, so a statement
    inserted elsewhere does not rename the definitions (and their sites).
    """
    ordinal = -1
    for stmt in stmts:
        yield stmt, where
        fields = BLOCK_FIELDS.get(type(stmt))
        if fields is None or not any(isinstance(n, FUNCTIONS) for n in ast.walk(stmt)):
            continue
        ordinal += 1
        for name, kind in fields:
            body = getattr(stmt, name)
            if body:
                inner = f"{where}/{kind}{ordinal}" if where else f"{kind}{ordinal}"
                yield from _statements_with_blocks(body, inner)
        if isinstance(stmt, ast.Try | ast.TryStar):
            for index, handler in enumerate(stmt.handlers):
                inner = f"{where}/except{ordinal}.{index}" if where else f"except{ordinal}.{index}"
                yield from _statements_with_blocks(handler.body, inner)


# ---- local sites ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalCall:
    """A counted call inside one function: a capability call or an effectful helper call."""

    node: ast.Call
    local: str
    helpers: tuple[Function, ...] = ()  # empty for a capability call


class LocalSites:
    def __init__(self, program: Program) -> None:
        self.program = program
        self.calls: dict[int, LocalCall] = {}
        self.by_function: dict[int, list[LocalCall]] = {}
        for function in program.functions:
            found: list[LocalCall] = []
            self._block(function, function.node.body, function.qualname, found)
            self.by_function[id(function.node)] = found
            for call in found:
                self.calls[id(call.node)] = call

    def _counted(self, function: Function, node: ast.AST) -> LocalCall | None:
        if is_site_call(node):
            return LocalCall(node, "")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helpers = [f for f in self.program.callees(function, node.func.id)
                       if self.program.is_effectful(f)]
            if helpers:
                return LocalCall(node, "", tuple(helpers))
        return None

    def _direct(self, function: Function, node: ast.AST) -> list[LocalCall]:
        found: list[LocalCall] = []
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, (*FUNCTIONS, ast.Lambda, ast.ClassDef)):
                continue
            counted = self._counted(function, current)
            if counted is not None:
                found.append(counted)
            stack.extend(ast.iter_child_nodes(current))
        return sorted(found, key=lambda c: (c.node.lineno, c.node.col_offset))

    def _contains(self, function: Function, stmt: ast.stmt) -> bool:
        for node in ast.walk(stmt):
            if is_site_call(node):
                return True
            if isinstance(node, ast.Name) and any(
                    self.program.is_effectful(f) for f in self.program.callees(function, node.id)):
                return True
        return False

    def _block(self, function: Function, stmts: list[ast.stmt], prefix: str,
               found: list[LocalCall]) -> None:
        ordinal = direct = 0
        for stmt in stmts:
            if isinstance(stmt, (*FUNCTIONS, ast.ClassDef)):
                continue
            fields = BLOCK_FIELDS.get(type(stmt))
            if fields is None:
                for call in self._direct(function, stmt):
                    found.append(LocalCall(call.node, f"{prefix}/#{direct}", call.helpers))
                    direct += 1
                continue
            if not self._contains(function, stmt):
                continue
            for header in _headers(stmt):  # test, iterator, context items count as direct
                for call in self._direct(function, header):
                    found.append(LocalCall(call.node, f"{prefix}/#{direct}", call.helpers))
                    direct += 1
            for name, kind in fields:
                body = getattr(stmt, name)
                if body:
                    self._block(function, body, f"{prefix}/{kind}{ordinal}", found)
            if isinstance(stmt, ast.Try | ast.TryStar):
                for index, handler in enumerate(stmt.handlers):
                    self._block(function, handler.body, f"{prefix}/except{ordinal}.{index}",
                                found)
            ordinal += 1


def _headers(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, ast.If | ast.While):
        return [stmt.test]
    if isinstance(stmt, ast.For | ast.AsyncFor):
        return [stmt.target, stmt.iter]
    if isinstance(stmt, ast.With | ast.AsyncWith):
        return list(stmt.items)
    if isinstance(stmt, ast.Try | ast.TryStar):
        return [h.type for h in stmt.handlers if h.type is not None]
    return []

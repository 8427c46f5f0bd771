"""Structural callsites and call-expression fingerprints (pure).

A *local site* names one call expression inside one function: ``f/b1/.../#j``
with ``f`` the function's qualified name, each ``b`` the kind and ordinal of a
statement block, ``j`` the ordinal of the call among the calls made directly in
the innermost block. Two kinds of call count: capability calls (``ctx.run``,
``ctx.race``) and calls of the script's own async helpers that reach one.

A *site* σ is the chain of local sites from ``orchestrate`` down to a capability
call, joined by ``>``: ``orchestrate/#1>orchestrate.gen/#0`` is the ``ctx.run``
of helper ``gen`` reached through the helper call ``#1`` of ``orchestrate``. A
helper called from two places therefore has two sites, and a call inserted in
front of a helper call no longer shifts the occurrences of the helper's calls.

Only blocks that contain a counted call are numbered and only counted calls
advance ``j``, so comments, formatting, payload values and call-free statements
inserted before a site leave σ unchanged, while wrapping a call in a new block
or moving it into a helper changes it (the gate's remap then relocates it).

A function defined inside a block is named after the block
(``orchestrate/if0.gen``), so two same-named definitions get distinct sites.
"""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeGuard

from broker.errors import AnnotationError
from broker.identity import sha256_hex

SITE_KEYWORD = "_site"
SITE_METHODS = frozenset({"run", "race"})
AT_FUNCTION = "__at__"  # the host's call-site tag around a helper call
FN_FUNCTION = "__fn__"  # ... and around a helper handed over as a value
RACE = "ctx.race"
ENTRY = "orchestrate"
MAX_SITES = 10_000

_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
_BLOCK_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {
    ast.If: (("body", "if"), ("orelse", "else")),
    ast.For: (("body", "for"), ("orelse", "forelse")),
    ast.AsyncFor: (("body", "afor"), ("orelse", "aforelse")),
    ast.While: (("body", "while"), ("orelse", "whileelse")),
    ast.With: (("body", "with"),),
    ast.AsyncWith: (("body", "awith"),),
    ast.Try: (("body", "try"), ("orelse", "tryelse"), ("finalbody", "finally")),
    ast.TryStar: (("body", "try"), ("orelse", "tryelse"), ("finalbody", "finally")),
}


@dataclass(frozen=True)
class Site:
    """One capability call as reached from the entry point."""

    site: str  # the chain of local sites, joined by ">"
    capability: str  # the capability name, or "ctx.race" for a race decision
    fingerprint: str  # the capability call's own expression
    chain_fingerprint: str  # ... and the arguments of every helper call on the way
    line: int  # of the capability call
    col: int  # UTF-8 byte offset, as the ast module reports it
    end_line: int
    end_col: int
    entry_line: int  # of the first call on the chain (the helper call in the caller)
    # The call's ``take=N`` when it is a literal (1 without one); None when it is computed
    # (``take=i + 1`` in a bounded loop): then the frame's take is only range-checked.
    take: int | None = 1
    # How many calls the script can make here in one revision (the product of the
    # static loop bounds along the chain); None when that has no static bound.
    max_calls: int | None = None


def is_site_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """``ctx.run(...)`` / ``ctx.race(...)`` on any receiver name (the checker pins it)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SITE_METHODS
        and isinstance(node.func.value, ast.Name)
    )


def is_at_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == AT_FUNCTION and len(node.args) == 2 and not node.keywords
            and isinstance(node.args[1], ast.Call))


def is_fn_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == FN_FUNCTION and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Name))


def capability_of(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "race":
        return RACE
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return "<dynamic>"


def _dump(node: ast.AST) -> str:
    """The node's normalized text, without host annotations at any depth."""
    if any(isinstance(n, ast.keyword) and n.arg == SITE_KEYWORD for n in ast.walk(node)):
        node = copy.deepcopy(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                sub.keywords = [kw for kw in sub.keywords if kw.arg != SITE_KEYWORD]
    return ast.dump(node, include_attributes=False)


def fingerprint(call: ast.Call) -> str:
    """Hash of the call's normalized expression; host annotations excluded.

    ``ast.dump`` without attributes ignores positions, comments and formatting;
    any literal or expression edit inside the call changes it.
    """
    parts = [_dump(arg) for arg in call.args]
    parts += [f"{kw.arg}={_dump(kw.value)}" for kw in call.keywords if kw.arg != SITE_KEYWORD]
    return sha256_hex(_dump(call.func) + "(" + ",".join(parts) + ")")


def arguments_fingerprint(call: ast.Call) -> str:
    """A helper call's arguments only: renaming the helper keeps it."""
    parts = [_dump(arg) for arg in call.args] + [f"{kw.arg}={_dump(kw.value)}"
                                                  for kw in call.keywords]
    return sha256_hex("(" + ",".join(parts) + ")")


# ---- functions, scopes and which of them reach a capability call ---------------------------


@dataclass
class _Scope:
    parent: _Scope | None
    bindings: dict[str, list[_Function]] = field(default_factory=dict)

    def resolve(self, name: str) -> list[_Function]:
        scope: _Scope | None = self
        while scope is not None:
            if name in scope.bindings:
                return scope.bindings[name]
            scope = scope.parent
        return []


@dataclass
class _Function:
    node: ast.FunctionDef | ast.AsyncFunctionDef
    qualname: str
    inner: _Scope  # the names bound inside the function's body


def unwrap_at(tree: ast.AST) -> dict[int, str]:
    """Replace each ``__at__("site", helper(...))`` by the helper call and each
    ``__fn__(helper)`` by the name, in place.

    Returns the tag of every unwrapped node (by node id; "" for a ``__fn__`` name),
    so the annotation can be verified after a re-parse.
    """
    tags: dict[int, str] = {}
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if is_at_call(item) or is_fn_call(item):
                        value[index] = _take_tag(item, tags)
            elif is_at_call(value) or is_fn_call(value):
                setattr(node, name, _take_tag(value, tags))
    return tags


def _take_tag(wrapper: ast.Call, tags: dict[int, str]) -> ast.expr:
    if is_fn_call(wrapper):
        tags[id(wrapper.args[0])] = ""
        return wrapper.args[0]
    inner = wrapper.args[1]
    assert isinstance(inner, ast.Call)
    tag = wrapper.args[0]
    tags[id(inner)] = tag.value if isinstance(tag, ast.Constant) and isinstance(
        tag.value, str) else ""
    return inner


class _Program:
    """Functions by qualified name, name resolution, and the effectful ones."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: list[_Function] = []
        self._collect(tree.body, _Scope(None), "")
        self.effectful = self._effectful()

    def _collect(self, stmts: list[ast.stmt], scope: _Scope, owner: str) -> None:
        """Bind every def in ``stmts`` (at any block depth, not inside other defs)."""
        seen: dict[str, int] = {}
        for stmt, block in _statements_with_blocks(stmts, ""):
            if not isinstance(stmt, _FUNCTIONS):
                continue
            base = stmt.name if not owner else (
                f"{owner}.{stmt.name}" if not block else f"{owner}/{block}.{stmt.name}")
            seen[base] = seen.get(base, 0) + 1
            qualname = base if seen[base] == 1 else f"{base}~{seen[base]}"
            function = _Function(stmt, qualname, _Scope(scope))
            self.functions.append(function)
            scope.bindings.setdefault(stmt.name, []).append(function)
            self._collect(stmt.body, function.inner, qualname)

    def callees(self, function: _Function, name: str) -> list[_Function]:
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

    def references(self, function: _Function) -> Iterator[tuple[ast.Name, list[_Function]]]:
        """Names in ``function``'s own body that resolve to script functions."""
        for node in _own_nodes(function.node):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                targets = function.inner.resolve(node.id)
                if targets:
                    yield node, targets

    def is_effectful(self, function: _Function) -> bool:
        return id(function.node) in self.effectful


def _own_nodes(fn: ast.AST) -> Iterator[ast.AST]:
    """Every node of a function's body, not descending into nested functions."""
    stack: list[ast.AST] = list(getattr(fn, "body", []))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
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
        fields = _BLOCK_FIELDS.get(type(stmt))
        if fields is None or not any(isinstance(n, _FUNCTIONS) for n in ast.walk(stmt)):
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
    helpers: tuple[_Function, ...] = ()  # empty for a capability call


class _LocalSites:
    def __init__(self, program: _Program) -> None:
        self.program = program
        self.calls: dict[int, LocalCall] = {}
        self.by_function: dict[int, list[LocalCall]] = {}
        for function in program.functions:
            found: list[LocalCall] = []
            self._block(function, function.node.body, function.qualname, found)
            self.by_function[id(function.node)] = found
            for call in found:
                self.calls[id(call.node)] = call

    def _counted(self, function: _Function, node: ast.AST) -> LocalCall | None:
        if is_site_call(node):
            return LocalCall(node, "")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            helpers = [f for f in self.program.callees(function, node.func.id)
                       if self.program.is_effectful(f)]
            if helpers:
                return LocalCall(node, "", tuple(helpers))
        return None

    def _direct(self, function: _Function, node: ast.AST) -> list[LocalCall]:
        found: list[LocalCall] = []
        stack = [node]
        while stack:
            current = stack.pop()
            if isinstance(current, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
                continue
            counted = self._counted(function, current)
            if counted is not None:
                found.append(counted)
            stack.extend(ast.iter_child_nodes(current))
        return sorted(found, key=lambda c: (c.node.lineno, c.node.col_offset))

    def _contains(self, function: _Function, stmt: ast.stmt) -> bool:
        for node in ast.walk(stmt):
            if is_site_call(node):
                return True
            if isinstance(node, ast.Name) and any(
                    self.program.is_effectful(f) for f in self.program.callees(function, node.id)):
                return True
        return False

    def _block(self, function: _Function, stmts: list[ast.stmt], prefix: str,
               found: list[LocalCall]) -> None:
        ordinal = direct = 0
        for stmt in stmts:
            if isinstance(stmt, (*_FUNCTIONS, ast.ClassDef)):
                continue
            fields = _BLOCK_FIELDS.get(type(stmt))
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


# ---- chains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteTable:
    """Every site reachable from the entry point, every counted call's local site, and
    every name that hands an effectful helper over as a value."""

    sites: tuple[Site, ...]
    local: dict[int, LocalCall]  # by id() of the call node in the parsed tree
    handed: frozenset[int] = frozenset()  # id() of those names

    def by_site(self) -> dict[str, Site]:
        return {s.site: s for s in self.sites}


def site_table(tree: ast.Module, executions: Callable[[ast.AST], int | None] | None = None
               ) -> SiteTable:
    """Sites of a parsed script (``__at__`` tags, if any, are unwrapped first).
    ``executions(call)`` says how many times a call can run in its function (the
    checker's bounds, ``orchestrator.checker.reach``); without it no site is bounded."""
    unwrap_at(tree)
    program = _Program(tree)
    local = _LocalSites(program)
    sites: dict[str, Site] = {}
    walk = _Chains(program, local, executions or (lambda node: None), sites)
    for root in [f for f in program.functions if f.qualname == ENTRY]:
        walk.function(root, (), (), None, 1, [])
    return SiteTable(tuple(sites.values()), local.calls, _handed(program, local))


def _handed(program: _Program, local: _LocalSites) -> frozenset[int]:
    """Names of effectful helpers used as values (not called): the runtime must know the
    chain they were handed over on, so the annotator tags them too."""
    called = {id(c.node.func) for c in local.calls.values()}
    return frozenset(id(name) for function in program.functions
                     for name, targets in program.references(function)
                     if id(name) not in called
                     and any(program.is_effectful(t) for t in targets))


class _Chains:
    """The walk from ``orchestrate`` down every helper call to the capability calls."""

    def __init__(self, program: _Program, local: _LocalSites,
                 executions: Callable[[ast.AST], int | None], out: dict[str, Site]) -> None:
        self.program, self.local, self.executions, self.out = program, local, executions, out

    def function(self, function: _Function, chain: tuple[str, ...], chain_fps: tuple[str, ...],
                 entry_line: int | None, bound: int | None, stack: list[int]) -> None:
        if id(function.node) in stack:
            return  # recursion: the checker refuses it; never loop here
        stack.append(id(function.node))
        calls = self.local.by_function.get(id(function.node), [])
        for call in calls:
            line = entry_line if entry_line is not None else call.node.lineno
            runs = self.executions(call.node)
            here = None if bound is None or runs is None else bound * runs
            if not call.helpers:
                self._add(call, chain, chain_fps, line, here)
                continue
            for helper in call.helpers:
                self.function(helper, (*chain, call.local),
                              (*chain_fps, arguments_fingerprint(call.node)), line, here, stack)
        # Helpers handed over as values (ctx.pipeline stages, ctx.dag nodes) run on this
        # chain, as often as the fanout that takes them wants: no static bound here.
        counted = {id(c.node.func) for c in calls}
        for name, targets in self.program.references(function):
            if id(name) in counted:
                continue
            for target in targets:
                if self.program.is_effectful(target):
                    self.function(target, chain, chain_fps, entry_line, None, stack)
        stack.pop()

    def _add(self, call: LocalCall, chain: tuple[str, ...], chain_fps: tuple[str, ...],
             entry_line: int, bound: int | None) -> None:
        node = call.node
        own = fingerprint(node)
        name = ">".join((*chain, call.local))
        seen = self.out.get(name)
        if seen is not None:  # reached on two ways: both count
            bound = None if bound is None or seen.max_calls is None else \
                bound + seen.max_calls
        self.out[name] = Site(
            site=name, capability=capability_of(node), fingerprint=own,
            chain_fingerprint=sha256_hex("|".join((*chain_fps, own))),
            line=node.lineno, col=node.col_offset, end_line=node.end_lineno or node.lineno,
            end_col=node.end_col_offset or 0, entry_line=entry_line,
            take=_literal_take(node), max_calls=bound)
        if len(self.out) > MAX_SITES:
            raise AnnotationError(f"the script reaches more than {MAX_SITES} call sites "
                                  "through its helpers; call fewer helpers from fewer places")


def _literal_take(node: ast.Call) -> int | None:
    for keyword in node.keywords:
        if keyword.arg == "take":
            value = keyword.value
            if isinstance(value, ast.Constant) and type(value.value) is int:
                return value.value
            return None
    return 1


def assign_sites(tree: ast.Module) -> list[Site]:
    """Every site reachable from ``orchestrate``."""
    return list(site_table(tree).sites)


def count_capability_calls(sites: list[Site] | tuple[Site, ...]) -> int:
    """Capability call *expressions* in the source (a helper's call counts once)."""
    return len({(s.site.rsplit(">", 1)[-1], s.fingerprint) for s in sites
                if s.capability != RACE})

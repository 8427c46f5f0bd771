"""Structural callsites σ = (f, b1..bk, j) and call-expression fingerprints (pure).

A site is written ``f/b1/.../#j``: ``f`` the enclosing function (nested
functions qualified with dots, e.g. ``orchestrate.gen``), each ``b`` the kind
and ordinal of a statement block, ``j`` the ordinal of the call among the
calls made directly in the innermost block.

Only blocks that contain a capability call are counted, and only capability
calls advance ``j``, so comments, formatting, payload values and call-free
statements inserted before a site leave σ unchanged (the paper's Lemma 1),
while wrapping a call in a new block or moving it into a helper changes it.
``ctx.race`` calls get sites too: the host records the winner there.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass
from typing import TypeGuard

from broker.identity import sha256_hex

SITE_KEYWORD = "_site"
SITE_METHODS = frozenset({"run", "race"})


@dataclass(frozen=True)
class Site:
    site: str
    capability: str  # the capability name, or "ctx.race" for a race decision
    fingerprint: str
    line: int
    col: int  # UTF-8 byte offset, as the ast module reports it
    end_line: int
    end_col: int


def is_site_call(node: ast.AST) -> TypeGuard[ast.Call]:
    """``ctx.run(...)`` / ``ctx.race(...)`` on any receiver name (the checker pins it)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in SITE_METHODS
        and isinstance(node.func.value, ast.Name)
    )


def capability_of(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "race":
        return "ctx.race"
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return "<dynamic>"


def _without_sites(node: ast.AST) -> ast.AST:
    """A copy of ``node`` with every ``_site`` keyword removed, at any depth."""
    clone = copy.deepcopy(node)
    for sub in ast.walk(clone):
        if isinstance(sub, ast.Call):
            sub.keywords = [kw for kw in sub.keywords if kw.arg != SITE_KEYWORD]
    return clone


def fingerprint(call: ast.Call) -> str:
    """Hash of the call's normalized argument AST; host annotations excluded.

    ``ast.dump`` without attributes ignores positions, comments and formatting;
    any literal or expression edit inside the call changes it.
    """
    bare = _without_sites(call)
    assert isinstance(bare, ast.Call)
    parts = [ast.dump(arg, include_attributes=False) for arg in bare.args]
    parts += [f"{kw.arg}={ast.dump(kw.value, include_attributes=False)}" for kw in bare.keywords]
    return sha256_hex(ast.dump(bare.func, include_attributes=False) + "(" + ",".join(parts) + ")")


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
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _direct_calls(node: ast.AST) -> list[ast.Call]:
    """Site calls in an expression or simple statement, not crossing into functions."""
    found: list[ast.Call] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, (*_FUNCTIONS, ast.Lambda, ast.ClassDef)):
            continue
        if is_site_call(current):
            found.append(current)
        stack.extend(ast.iter_child_nodes(current))
    return sorted(found, key=lambda c: (c.lineno, c.col_offset))


def _contains_site_call(node: ast.AST) -> bool:
    return any(is_site_call(n) for n in ast.walk(node))


class _SiteAssigner:
    def __init__(self) -> None:
        self.sites: list[Site] = []
        self._nodes: list[ast.Call] = []

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str) -> None:
        for arg_default in fn.args.defaults + fn.args.kw_defaults:
            if arg_default is not None:
                self._calls_in(arg_default, qualname)
        self.block(fn.body, qualname, qualname)

    def block(self, stmts: list[ast.stmt], prefix: str, qualname: str) -> None:
        ordinal = 0
        direct = 0
        for stmt in stmts:
            if isinstance(stmt, _FUNCTIONS):
                self.function(stmt, f"{qualname}.{stmt.name}")
                continue
            if isinstance(stmt, ast.ClassDef):
                continue
            fields = _BLOCK_FIELDS.get(type(stmt))
            if fields is None:
                for call in _direct_calls(stmt):
                    self._add(call, f"{prefix}/#{direct}")
                    direct += 1
                continue
            if not _contains_site_call(stmt):
                continue
            # Header expressions (test, iterator, context items) count as direct calls.
            for header in _headers(stmt):
                for call in _direct_calls(header):
                    self._add(call, f"{prefix}/#{direct}")
                    direct += 1
            for field, kind in fields:
                body = getattr(stmt, field)
                if body:
                    self.block(body, f"{prefix}/{kind}{ordinal}", qualname)
            if isinstance(stmt, ast.Try | ast.TryStar):
                for index, handler in enumerate(stmt.handlers):
                    self.block(handler.body, f"{prefix}/except{ordinal}.{index}", qualname)
            ordinal += 1

    def _calls_in(self, node: ast.AST, prefix: str) -> None:
        for index, call in enumerate(_direct_calls(node)):
            self._add(call, f"{prefix}/default#{index}")

    def _add(self, call: ast.Call, site: str) -> None:
        self._nodes.append(call)
        self.sites.append(Site(
            site=site, capability=capability_of(call), fingerprint=fingerprint(call),
            line=call.lineno, col=call.col_offset,
            end_line=call.end_lineno or call.lineno, end_col=call.end_col_offset or 0,
        ))


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


def assign_sites(tree: ast.Module) -> list[Site]:
    """Every ctx.run/ctx.race call in source order of traversal, with its site."""
    assigner = _SiteAssigner()
    for stmt in tree.body:
        if isinstance(stmt, _FUNCTIONS):
            assigner.function(stmt, stmt.name)
        elif not isinstance(stmt, ast.ClassDef):
            for call in _direct_calls(stmt):
                assigner._add(call, f"<module>/#{len(assigner.sites)}")
    return assigner.sites


def site_map(sites: list[Site]) -> dict[str, Site]:
    return {s.site: s for s in sites}


def count_capability_calls(sites: list[Site]) -> int:
    return sum(1 for s in sites if s.capability != "ctx.race")

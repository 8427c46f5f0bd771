"""What every rule receives: the tree, the script model (with the parent map and the node
buckets of the one walk), bound queries and small helpers. Rules ask for nodes by type
(``an.nodes(ast.Call)``); none of them walks the tree again."""

from __future__ import annotations

import ast
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from .bounds import Bounds
from .builtins import CTX_METHODS
from .model import Violation
from .scope import ScriptModel


def nfkc(text: str) -> str:
    """Compare names the way Python compares identifiers (NFKC), also for string data."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def snippet(node: ast.AST, limit: int = 60) -> str:
    """Short source text of a node for messages; never raises."""
    try:
        text = ast.unparse(node)
    except (ValueError, TypeError, AttributeError, RecursionError):
        return "<expression>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def line_of(node: ast.AST) -> int:
    return max(int(getattr(node, "lineno", 1) or 1), 1)


@dataclass
class Analysis:
    tree: ast.Module
    model: ScriptModel
    capabilities: frozenset[str]
    bounds: Bounds = field(init=False)

    def __post_init__(self) -> None:
        self.bounds = Bounds(self.model)

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.model.parents.get(id(node))

    def nodes(self, *types: type) -> Sequence[Any]:
        """Every node of these exact types, in walk order per type (never copied for one)."""
        buckets = self.model.buckets
        if len(types) == 1:
            return buckets.get(types[0], ())
        found: list[Any] = []
        for kind in types:
            found.extend(buckets.get(kind, ()))
        return found

    def ctx_method(self, node: ast.AST | None) -> str | None:
        """``ctx.<name>(...)``: the method name (known or not) when ``node`` is such a call."""
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and self.model.is_ctx(node.func.value)):
            return node.func.attr
        return None

    @cached_property
    def _ctx_calls(self) -> list[tuple[ast.Call, str]]:
        found = []
        for node in self.nodes(ast.Call):
            method = self.ctx_method(node)
            if method is not None:
                found.append((node, method))
        return found

    def ctx_calls(self, *methods: str) -> list[tuple[ast.Call, str]]:
        """Calls of known ctx methods (all of them, or only these), in walk order."""
        wanted = methods or CTX_METHODS
        return [(call, method) for call, method in self._ctx_calls if method in wanted]

    @staticmethod
    def violation(rule: str, node: ast.AST | int, message: str, hint: str,
                  severity: str = "error") -> Violation:
        line = node if isinstance(node, int) else line_of(node)
        return Violation(rule, line, message, hint, severity)

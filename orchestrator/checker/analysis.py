"""What every rule receives: the tree, the script model, bound queries and small helpers."""

from __future__ import annotations

import ast
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field

from .bounds import Bounds
from .builtins import CTX_METHODS
from .model import Violation
from .scope import ScriptModel


def nfkc(text: str) -> str:
    """Compare names the way Python compares identifiers (NFKC), also for string data."""
    return unicodedata.normalize("NFKC", text)


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
    parents: dict[int, ast.AST] = field(init=False)

    def __post_init__(self) -> None:
        self.bounds = Bounds(self.model)
        self.parents = {}
        for node in ast.walk(self.tree):
            for child in ast.iter_child_nodes(node):
                self.parents[id(child)] = node

    def parent(self, node: ast.AST) -> ast.AST | None:
        return self.parents.get(id(node))

    def walk(self) -> Iterator[ast.AST]:
        return ast.walk(self.tree)

    def ctx_method(self, node: ast.AST) -> str | None:
        """``ctx.<name>(...)``: the method name (known or not) when ``node`` is such a call."""
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and self.model.is_ctx(node.func.value)):
            return node.func.attr
        return None

    def ctx_calls(self, *methods: str) -> Iterator[tuple[ast.Call, str]]:
        wanted = set(methods) if methods else set(CTX_METHODS)
        for node in ast.walk(self.tree):
            method = self.ctx_method(node)
            if method in wanted and isinstance(node, ast.Call):
                yield node, method

    @staticmethod
    def violation(rule: str, node: ast.AST | int, message: str, hint: str,
                  severity: str = "error") -> Violation:
        line = node if isinstance(node, int) else line_of(node)
        return Violation(rule, line, message, hint, severity)

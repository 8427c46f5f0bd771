"""R06 (dunder, private and format-string access), R07 (builtins by allowlist, no undefined
names) and the name side of R10 (no imports, ``_site`` reserved in every spelling)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, nfkc
from .builtins import (
    ALLOWED_BUILTINS,
    DENIED_BUILTIN_REASONS,
    FORMAT_METHODS,
    IMPORT_NAMES,
    INTROSPECTION_ATTRIBUTES,
    NONDETERMINISTIC_NAMES,
    REFLECTION_NAMES,
)
from .consts import fold_quiet
from .model import Violation
from .scope import FunctionNode, all_params

SITE = "_site"
_SITE_HINT = "remove it: _site is reserved for the host, which assigns call sites itself"
_FSTRING_HINT = 'use an f-string with plain names: f"{name} has {count} items"'


def _r06(node: ast.AST, message: str, hint: str) -> Violation:
    return Analysis.violation("R06", node, message, hint)


def _r10(node: ast.AST, message: str, hint: str = _SITE_HINT) -> Violation:
    return Analysis.violation("R10", node, message, hint)


def _identifier(node: ast.AST, name: str, what: str) -> Iterator[Violation]:
    """A name the script defines or reads: reserved, dunder and private checks."""
    normal = nfkc(name)
    if normal == SITE:
        yield _r10(node, f"the {what} {SITE} is reserved for the host")
    elif normal == "__import__":
        yield _r10(node, "__import__ is an import", "remove it; scripts cannot import")
    elif normal.startswith("__"):
        yield _r06(node, f"the dunder {what} {normal} is not allowed",
                   "use ordinary names; dunder names reach interpreter internals")


def check_identifiers(an: Analysis) -> Iterator[Violation]:
    for node in an.walk():
        if isinstance(node, ast.Name):
            yield from _identifier(node, node.id, "name")
        elif isinstance(node, FunctionNode):
            yield from _identifier(node, node.name, "function name")
            for param in all_params(node):
                yield from _identifier(param, param.arg, "parameter")
        elif isinstance(node, ast.keyword) and node.arg is not None:
            yield from _identifier(node.value, node.arg, "keyword argument")
        elif isinstance(node, ast.Attribute):
            yield from _attribute(node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            yield _r10(node, "imports are not allowed",
                       "remove the import; call capabilities with await ctx.run(...) and use "
                       "the allowed builtins")


def _attribute(node: ast.Attribute) -> Iterator[Violation]:
    attr = nfkc(node.attr)
    if attr == SITE:
        yield _r10(node, f"the attribute {SITE} is reserved for the host")
    elif attr.startswith("_"):
        kind = "dunder" if attr.startswith("__") else "private"
        yield _r06(node, f"{kind} attribute access .{attr} is not allowed",
                   "use only public methods of str, list and dict, and the ctx methods")
    elif attr in FORMAT_METHODS:
        yield _r06(node, f".{attr}() can read attributes through its format string",
                   _FSTRING_HINT)
    elif attr in INTROSPECTION_ATTRIBUTES:
        yield _r06(node, f".{attr} reaches interpreter internals (frames, code, tracebacks)",
                   "work with the values your calls return; scripts never inspect frames, "
                   "generators or code objects")


def check_strings(an: Analysis) -> Iterator[Violation]:
    """``_site`` spelled as data, and %-formatting."""
    for node in an.walk():
        nested = isinstance(an.parent(node), ast.BinOp | ast.JoinedStr | ast.FormattedValue)
        if isinstance(node, ast.Constant | ast.BinOp | ast.JoinedStr) and not nested:
            value = fold_quiet(node, an.model.env)
            if isinstance(value, str) and nfkc(value).strip() == SITE:
                yield _r10(node, f"the string {SITE!r} is reserved for the host")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_text(an, node):
            yield _r06(node, "%-formatting can read attributes through its format string",
                       _FSTRING_HINT)


def _is_text(an: Analysis, node: ast.BinOp) -> bool:
    left = node.left
    if isinstance(left, ast.JoinedStr):
        return True
    return isinstance(fold_quiet(left, an.model.env), str | bytes)


def check_free_names(an: Analysis) -> Iterator[Violation]:
    """Every name must be a script binding or an allowed builtin (no hidden inputs)."""
    for node in an.walk():
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        if an.model.resolve(node.id, an.model.scope_of(node)) is not None:
            continue
        name = node.id
        if name in ALLOWED_BUILTINS or name in NONDETERMINISTIC_NAMES or name in IMPORT_NAMES:
            continue  # allowed, or reported by R04 / R10
        if name.startswith("__") or name == SITE:
            continue  # reported by check_identifiers
        if name in REFLECTION_NAMES:
            yield _r06(node, f"{name}() reaches attributes by name",
                       "index dicts with d[\"key\"] or d.get(\"key\"); no reflection")
        elif name in DENIED_BUILTIN_REASONS:
            yield Analysis.violation("R07", node, f"{name} is not an allowed builtin "
                                     f"({DENIED_BUILTIN_REASONS[name]})", _builtins_hint())
        else:
            yield Analysis.violation("R07", node, f"{name} is not defined in the script "
                                     "and is not an allowed builtin",
                                     f"define {name} (parameter, assignment, loop variable "
                                     f"or top-level constant) before use; {_builtins_hint()}")


def _builtins_hint() -> str:
    return "allowed builtins: " + ", ".join(sorted(ALLOWED_BUILTINS))

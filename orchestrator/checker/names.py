"""Names: dunder identifiers (R06), builtins by allowlist and no undefined names (R07), and
the name side of R10 (no imports, ``_site`` reserved in every spelling)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, nfkc
from .bindings import FUNCTION_TYPES
from .builtins import (
    ALLOWED_BUILTINS,
    DENIED_BUILTIN_REASONS,
    IMPORT_NAMES,
    NONDETERMINISTIC_NAMES,
    REFLECTION_NAMES,
)
from .consts import fold_quiet
from .model import Violation

SITE = "_site"
SITE_HINT = "remove it: _site is reserved for the host, which assigns call sites itself"


def _r06(node: ast.AST, message: str, hint: str) -> Violation:
    return Analysis.violation("R06", node, message, hint)


def _r10(node: ast.AST, message: str, hint: str = SITE_HINT) -> Violation:
    return Analysis.violation("R10", node, message, hint)


def _identifier(node: ast.AST, name: str, what: str) -> Iterator[Violation]:
    """A name the script defines or reads: reserved, dunder and private checks."""
    if name.isascii() and not name.startswith("_"):
        return
    normal = nfkc(name)
    if normal == SITE:
        yield _r10(node, f"the {what} {SITE} is reserved for the host")
    elif normal == "__import__":
        yield _r10(node, "__import__ is an import", "remove it; scripts cannot import")
    elif normal.startswith("__"):
        yield _r06(node, f"the dunder {what} {normal} is not allowed",
                   "use ordinary names; dunder names reach interpreter internals")


def check_identifiers(an: Analysis) -> Iterator[Violation]:
    for name in an.model.names:
        if name.id.startswith("_") or not name.id.isascii():
            yield from _identifier(name, name.id, "name")
    for func in an.nodes(*FUNCTION_TYPES):
        yield from _identifier(func, func.name, "function name")
    for param in an.nodes(ast.arg):  # parameters of functions and lambdas
        yield from _identifier(param, param.arg, "parameter")
    for kw in an.nodes(ast.keyword):
        if kw.arg is not None and (kw.arg.startswith("_") or not kw.arg.isascii()):
            yield from _identifier(kw.value, kw.arg, "keyword argument")
    for node in an.nodes(ast.Import, ast.ImportFrom):
        yield _r10(node, "imports are not allowed",
                   "remove the import; call capabilities with await ctx.run(...) and use "
                   "the allowed builtins")


_TEXT_PARTS = (ast.BinOp, ast.JoinedStr, ast.FormattedValue)


def check_reserved_strings(an: Analysis) -> Iterator[Violation]:
    """``_site`` spelled as data: a literal, constant concatenation or an f-string."""
    env = an.model.env
    for node in an.nodes(ast.Constant):
        value = node.value
        if (isinstance(value, str) and nfkc(value).strip() == SITE
                and not isinstance(an.parent(node), _TEXT_PARTS)):
            yield _r10(node, f"the string {SITE!r} is reserved for the host")
    for node in an.nodes(ast.BinOp, ast.JoinedStr):
        if isinstance(an.parent(node), _TEXT_PARTS):
            continue  # folded as part of the enclosing expression
        value = fold_quiet(node, env)
        if isinstance(value, str) and nfkc(value).strip() == SITE:
            yield _r10(node, f"the string {SITE!r} is reserved for the host")


def check_free_names(an: Analysis) -> Iterator[Violation]:
    """Every name must be a script binding or an allowed builtin (no hidden inputs)."""
    for node in an.model.free_names:
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

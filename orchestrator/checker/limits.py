"""R00: parse and size limits, enforced before and right after ``ast.parse``.

Deep nesting is measured on tokens first, so a hostile script cannot drive the parser
into recursion; the parsed tree is then measured iteratively (never recursively) before
any rule visitor walks it.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.source import MAX_SOURCE_BYTES

from .consts import MAX_INT_BITS, MAX_STR_LEN, TooLarge, fold
from .model import Violation

MAX_BRACKET_DEPTH = 40
MAX_INDENT_DEPTH = 24
MAX_OPERATOR_RUN = 40
MAX_AST_NODES = 50_000
MAX_AST_DEPTH = 100

_OPEN = frozenset("([{")
_CLOSE = frozenset(")]}")
_PREFIX_OPS = frozenset({"-", "+", "~", "not", "await", "lambda", "*"})

_FLATTEN = ("assign intermediate results to names, or move parts into helper functions, "
            "so that no expression or block nests this deep")


def _r00(line: int, message: str, hint: str) -> Violation:
    return Violation("R00", max(int(line or 1), 1), message, hint)


def check_size(text: str) -> Violation | None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        return _r00(1, f"script is {size} bytes; the limit is {MAX_SOURCE_BYTES}",
                    "move data into args instead of literals, and keep the script short")
    return None


def _depth_events(text: str) -> Iterator[tuple[int, int, int, int]]:
    """Yield (line, bracket depth, indent depth, prefix-operator run) per token."""
    brackets = indents = run = 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.INDENT:
            indents += 1
        elif tok.type == tokenize.DEDENT:
            indents = max(indents - 1, 0)
        elif tok.string in _OPEN and tok.type == tokenize.OP:
            brackets += 1
        elif tok.string in _CLOSE and tok.type == tokenize.OP:
            brackets = max(brackets - 1, 0)
        run = run + 1 if tok.string in _PREFIX_OPS else 0
        yield tok.start[0], brackets, indents, run


def prescan(text: str) -> Violation | None:
    """Bracket, indentation and operator-chain depth, measured on tokens before parsing."""
    try:
        for line, brackets, indents, run in _depth_events(text):
            if brackets > MAX_BRACKET_DEPTH:
                return _r00(line, f"brackets nest deeper than {MAX_BRACKET_DEPTH} levels",
                            _FLATTEN)
            if indents > MAX_INDENT_DEPTH:
                return _r00(line, f"blocks nest deeper than {MAX_INDENT_DEPTH} levels",
                            _FLATTEN)
            if run > MAX_OPERATOR_RUN:
                return _r00(line, f"more than {MAX_OPERATOR_RUN} prefix operators in a row",
                            _FLATTEN)
    except (tokenize.TokenError, SyntaxError, ValueError):
        return None  # ast.parse reports the syntax error with a better message
    return None


def parse(text: str) -> tuple[ast.Module | None, Violation | None]:
    """Parse without compiling; every parser failure becomes one R00 violation."""
    try:
        with warnings.catch_warnings():
            # Same verdict whatever the process's warning filters (e.g. -W error).
            warnings.simplefilter("ignore")
            return ast.parse(text, mode="exec"), None
    except SyntaxError as exc:
        line = exc.lineno or 1
        return None, _r00(line, f"syntax error at line {line}: {exc.msg}",
                          f"fix the Python 3.11 syntax at line {line}; the script must parse "
                          "as a module that defines async def orchestrate(ctx, args)")
    except (RecursionError, MemoryError):
        return None, _r00(1, "the script is too deeply nested or too complex to parse",
                          _FLATTEN)
    except ValueError as exc:
        return None, _r00(1, f"the script cannot be parsed: {exc}",
                          "save the script as plain UTF-8 Python text")


def measure(tree: ast.AST) -> Violation | None:
    """Node count and nesting depth of the tree, walked with an explicit stack."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    count = 0
    while stack:
        node, depth = stack.pop()
        count += 1
        if count > MAX_AST_NODES:
            return _r00(getattr(node, "lineno", 1),
                        f"script has more than {MAX_AST_NODES} syntax nodes",
                        "shorten the script: move data into args and repeated code into "
                        "helper functions")
        if depth > MAX_AST_DEPTH:
            return _r00(getattr(node, "lineno", 1),
                        f"expressions nest deeper than {MAX_AST_DEPTH} levels", _FLATTEN)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return None


# FormattedValue only ever sits inside a JoinedStr, whose fold covers its parts.
_FOLDABLE = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple, ast.Dict,
             ast.JoinedStr, ast.FormattedValue)


def _fold_roots(tree: ast.AST) -> Iterator[ast.AST]:
    """Maximal foldable subtrees: each node is folded once, as part of its root."""
    stack: list[tuple[ast.AST, bool]] = [(tree, False)]
    while stack:
        node, inside = stack.pop()
        foldable = isinstance(node, _FOLDABLE)
        if foldable and not inside:
            yield node
        for child in ast.iter_child_nodes(node):
            stack.append((child, foldable))


def huge_literals(tree: ast.AST, env: Mapping[str, Any]) -> list[Violation]:
    """Literals, and constant arithmetic on them, that would build a huge value."""
    found: list[Violation] = []
    for root in _fold_roots(tree):
        try:
            fold(root, env)
        except TooLarge as exc:
            found.append(_r00(
                getattr(exc.node, "lineno", getattr(root, "lineno", 1)),
                f"huge literal: {exc.message}",
                f"keep constants small (integers under {MAX_INT_BITS} bits, strings under "
                f"{MAX_STR_LEN} characters); pass large data in args"))
    return found

"""R00: parse and size limits, enforced before and right after ``ast.parse``.

Deep nesting is measured on tokens first, so a hostile script cannot drive the parser
into recursion; the parsed tree is then measured iteratively (never recursively) before
any rule visitor walks it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from itertools import accumulate

from broker.syntax import parse_python
from orchestrator.source import MAX_SOURCE_BYTES
from sandbox.language import MAX_VALUE_DEPTH

from .consts import MAX_INT_BITS, MAX_STR_LEN, TooLarge, check_value, fold
from .model import Violation
from .walk import MAX_AST_DEPTH, MAX_AST_NODES, TreeTooLarge, Walked

__all__ = ["MAX_AST_DEPTH", "MAX_AST_NODES", "check_size", "huge_literals", "parse",
           "prescan", "tree_too_large"]

MAX_BRACKET_DEPTH = 40
MAX_INDENT_DEPTH = 24
MAX_OPERATOR_RUN = 40

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


# Comments and string literals, found left to right as the tokenizer finds them, so that
# brackets and operators inside them are not counted.
_STRINGS_AND_COMMENTS = re.compile(r"""
    \#[^\n]*
  | '''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)
  | \"\"\"[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:\"\"\"|\Z)
  | '[^'\\\n]*(?:\\.[^'\\\n]*)*'?
  | "[^"\\\n]*(?:\\.[^"\\\n]*)*"?
""", re.VERBOSE | re.DOTALL)
_KEEP_BRACKETS = {i: None for i in range(128) if chr(i) not in "()[]{}"}
_NOT_BRACKET = re.compile(r"[^()\[\]{}]+")
_BRACKET_STEP = {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}
_INDENT = re.compile(r"^[ \t\f]+(?=[^ \t\f\r\n#])", re.MULTILINE)
_OPERATOR_TEXTS = ("-", "+", "~", "*", "not", "await", "lambda")
_OPERATOR_RUN = re.compile(
    r"(?:(?:[-+~*]|\b(?:not|await|lambda)\b)(?:[ \t\f]|\\\r?\n)*)"
    + f"{{{MAX_OPERATOR_RUN + 1}}}")


def _surely_shallow(text: str) -> bool:
    """A quick over-estimate of the three depths: True only when none can be over its limit.

    Brackets are counted outside comments and strings; indentation by the number of distinct
    indentation strings (an upper bound on the tokenizer's indent stack; a block needs a line
    of its own); operator runs by counting every operator first. Anything else goes to the
    exact token scan, which also names the line. Counts over the raw text come first: they
    over-count (strings and comments included), so a small count settles it at once. Only
    on text the tokenizer cannot read (an unterminated string) can the two disagree, and
    the parser rejects such text anyway."""
    if (text.count("\n") > MAX_INDENT_DEPTH
            and len(set(_INDENT.findall(text))) > MAX_INDENT_DEPTH):
        return False
    openers = text.count("(") + text.count("[") + text.count("{")
    operators = sum(text.count(op) for op in _OPERATOR_TEXTS)
    if openers <= MAX_BRACKET_DEPTH and operators <= MAX_OPERATOR_RUN:
        return True
    code = _STRINGS_AND_COMMENTS.sub(" ", text)
    brackets = code.translate(_KEEP_BRACKETS)
    if not brackets.isascii():
        brackets = _NOT_BRACKET.sub("", brackets)
    if brackets:
        levels = list(accumulate(map(_BRACKET_STEP.__getitem__, brackets)))
        if max(levels) > MAX_BRACKET_DEPTH or min(levels) < 0:
            return False
    operators = sum(code.count(op) for op in _OPERATOR_TEXTS)
    return operators <= MAX_OPERATOR_RUN or _OPERATOR_RUN.search(code) is None


def prescan(text: str) -> Violation | None:
    """Bracket, indentation and operator-chain depth, measured before parsing."""
    return None if _surely_shallow(text) else token_scan(text)


def token_scan(text: str) -> Violation | None:
    """The exact measure, on tokens (slow: only when the quick over-estimate is not sure)."""
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
        return parse_python(text), None
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


def tree_too_large(exc: TreeTooLarge) -> Violation:
    """The walk stopped at a tree limit (node count or depth)."""
    hint = (_FLATTEN if "nest" in exc.message else
            "shorten the script: move data into args and repeated code into helper functions")
    return _r00(exc.line, exc.message, hint)


# FormattedValue only ever sits inside a JoinedStr, whose fold covers its parts.
_FOLDABLE = (ast.Constant, ast.BinOp, ast.UnaryOp, ast.List, ast.Tuple, ast.Dict,
             ast.JoinedStr, ast.FormattedValue)
_INT_LIMIT = 1 << MAX_INT_BITS
# Only operators can build a value larger than the source text that spells it.
_GROWING = (ast.BinOp, ast.UnaryOp)


def huge_literals(model: Walked) -> list[Violation]:
    """Literals, and constant arithmetic on them, that would build a huge value.

    A plain literal is as large as its source text, so only its own size is checked; an
    operator is folded once, from the outermost foldable expression that contains it."""
    found: list[Violation] = []
    for node in model.buckets.get(ast.Constant, ()):
        value = node.value
        kind = type(value)
        if (kind is str or kind is bytes) and len(value) <= MAX_STR_LEN:
            continue
        if kind is int and -_INT_LIMIT < value < _INT_LIMIT:
            continue
        try:
            check_value(value, node)
        except TooLarge as exc:
            found.append(_huge(exc, node))
    roots: dict[int, ast.AST] = {}
    for kind in _GROWING:
        for node in model.buckets.get(kind, ()):
            root = node
            parent = model.parents.get(id(root))
            while isinstance(parent, _FOLDABLE):
                root, parent = parent, model.parents.get(id(parent))
            roots[id(root)] = root
    # A top-level constant built from others by reference (B = [A, A]) has no operator
    # and can still be huge as a tree.
    for stmt in model.tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            roots.setdefault(id(stmt.value), stmt.value)
    for root in roots.values():
        try:
            fold(root, model.env)
        except TooLarge as exc:
            found.append(_huge(exc, root))
    return found + _deep_displays(model)


_DISPLAYS = (ast.List, ast.Tuple, ast.Dict, ast.Set)


def _deep_displays(model: Walked) -> list[Violation]:
    """List, tuple, dict and set displays nested deeper than a value may be (the limit
    the runtime and the host hold payloads and results to)."""
    found = []
    for kind in _DISPLAYS:
        for node in model.buckets.get(kind, ()):
            if isinstance(model.parents.get(id(node)), _DISPLAYS):
                continue  # measured from its outermost display
            stack: list[tuple[ast.AST, int]] = [(node, 1)]
            while stack:
                item, depth = stack.pop()
                if depth > MAX_VALUE_DEPTH:
                    found.append(_r00(node.lineno, f"a constant nests deeper than "
                                      f"{MAX_VALUE_DEPTH} levels of lists and dicts",
                                      "flatten it: payloads and results may nest at most "
                                      f"{MAX_VALUE_DEPTH} levels"))
                    break
                children = (item.values if isinstance(item, ast.Dict) else
                            getattr(item, "elts", ()))
                stack.extend((c, depth + 1) for c in children
                             if isinstance(c, _DISPLAYS))
    return found


def _huge(exc: TooLarge, root: ast.AST) -> Violation:
    return _r00(getattr(exc.node, "lineno", getattr(root, "lineno", 1)),
                f"huge literal: {exc.message}",
                f"keep constants small (integers under {MAX_INT_BITS} bits, strings under "
                f"{MAX_STR_LEN} characters); pass large data in args")

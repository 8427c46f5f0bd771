"""Fold constant expressions without ever building a huge value.

Each operation that can grow a value (``**``, ``*``, ``<<``, ``+`` on sequences) is sized
*before* it runs, so ``10 ** 100000`` or ``"x" * 10 ** 9`` is reported as too large instead
of being computed. Anything that is not a literal, a container of literals, arithmetic on
them or a name from ``env`` folds to ``NOT_CONSTANT``.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.language import LIMITS

MAX_INT_BITS = LIMITS["int_bits"]
MAX_STR_LEN = LIMITS["string_chars"]
MAX_SEQ_LEN = LIMITS["value_items"]
MAX_FOLD_DEPTH = 120
# Items of a constant counted as a tree: a part shared by reference (``B = [A, A]``,
# ``[A] * 50``) counts every time it appears, as it does for anything that walks the value.
MAX_TREE_ITEMS = MAX_SEQ_LEN
_MAX_VALUE_DEPTH = 200


class TooLarge(Exception):
    """A constant expression would build a value beyond the literal limits."""

    def __init__(self, message: str, node: ast.AST) -> None:
        super().__init__(message)
        self.message = message
        self.node = node


class _NotConstant:
    def __repr__(self) -> str:
        return "NOT_CONSTANT"


NOT_CONSTANT: Any = _NotConstant()

_SAFE_OPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow, ast.LShift: operator.lshift, ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Invert: operator.invert,
    ast.Not: operator.not_,
}


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _size(value: Any) -> int | None:
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset):
        return len(value)
    return None


def check_value(value: Any, node: ast.AST) -> Any:
    """Raise TooLarge when a folded value exceeds the literal limits."""
    if is_int(value) and value.bit_length() > MAX_INT_BITS:
        raise TooLarge(f"integer constant has {value.bit_length()} bits "
                       f"(limit {MAX_INT_BITS})", node)
    if isinstance(value, str | bytes) and len(value) > MAX_STR_LEN:
        raise TooLarge(f"string constant has {len(value)} characters "
                       f"(limit {MAX_STR_LEN})", node)
    size = _size(value)
    if size is not None and size > MAX_SEQ_LEN:
        raise TooLarge(f"constant collection has {size} items (limit {MAX_SEQ_LEN})", node)
    if isinstance(value, list | tuple | dict | set | frozenset) and _tree_items(
            value, {}, 0) > MAX_TREE_ITEMS:
        raise TooLarge(f"constant holds over {MAX_TREE_ITEMS} items in total once its shared "
                       "parts are counted every time they appear", node)
    return value


def _tree_items(value: Any, seen: dict[int, int], depth: int) -> int:
    """Items of ``value`` as a tree, stopping just past MAX_TREE_ITEMS.

    Memoised per object, so a value built by sharing (``A1 = [A0, A0]``, ...,
    ``A59 = [A58, A58]``: 2**60 items as a tree, 60 objects) costs at most the
    limit, never the tree."""
    if not isinstance(value, list | tuple | dict | set | frozenset):
        return 1
    if depth > _MAX_VALUE_DEPTH:
        return MAX_TREE_ITEMS + 1
    known = seen.get(id(value))
    if known is not None:
        return known
    total = 1
    children = [*value.keys(), *value.values()] if isinstance(value, dict) else value
    for child in children:
        total += _tree_items(child, seen, depth + 1)
        if total > MAX_TREE_ITEMS:
            break
    seen[id(value)] = total
    return total


def _bits(value: Any) -> float:
    if is_int(value) or isinstance(value, bool):
        return max(int(value).bit_length(), 1)
    return 64.0


def _presize(op: ast.operator, left: Any, right: Any, node: ast.AST) -> None:
    """Estimate the result size of ``left op right`` and refuse before computing it."""
    if isinstance(op, ast.Pow) and is_int(left) and is_int(right) and right > 0:
        if abs(left) > 1 and _bits(left) * right > MAX_INT_BITS:
            raise TooLarge(f"{left} ** {right} is a huge integer "
                           f"(over {MAX_INT_BITS} bits)", node)
    if isinstance(op, ast.LShift) and is_int(left) and is_int(right) and left != 0:
        if right > MAX_INT_BITS:
            raise TooLarge(f"{left} << {right} is a huge integer", node)
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            size = _size(seq)
            if size is not None and (is_int(count) or isinstance(count, bool)):
                if size * max(int(count), 0) > max(MAX_STR_LEN, MAX_SEQ_LEN):
                    raise TooLarge(f"repeating a {size}-item constant {count} times "
                                   "builds a huge value", node)


class Folder:
    """Fold expressions over a name environment of already-folded top-level constants."""

    def __init__(self, env: Mapping[str, Any] | None = None) -> None:
        self.env: Mapping[str, Any] = env if env is not None else {}

    def fold(self, node: ast.AST, depth: int = 0) -> Any:
        if depth > MAX_FOLD_DEPTH:
            return NOT_CONSTANT
        handler = _HANDLERS.get(type(node))
        if handler is None:
            return NOT_CONSTANT
        try:
            value = handler(self, node, depth + 1)
        except (ArithmeticError, TypeError, ValueError, MemoryError, RecursionError):
            return NOT_CONSTANT
        if value is NOT_CONSTANT:
            return value
        return check_value(value, node)

    def _constant(self, node: ast.Constant, depth: int) -> Any:
        if node.value is Ellipsis or isinstance(node.value, complex):
            return NOT_CONSTANT
        return node.value

    def _name(self, node: ast.Name, depth: int) -> Any:
        return self.env.get(node.id, NOT_CONSTANT)

    def _seq(self, node: ast.List | ast.Tuple, depth: int) -> Any:
        items = [self.fold(elt, depth) for elt in node.elts]
        if any(item is NOT_CONSTANT for item in items):
            return NOT_CONSTANT
        return items if isinstance(node, ast.List) else tuple(items)

    def _dict(self, node: ast.Dict, depth: int) -> Any:
        # Fold every child first so a huge value hidden after a ``**spread`` is still seen.
        keys = [None if key is None else self.fold(key, depth) for key in node.keys]
        values = [self.fold(value, depth) for value in node.values]
        if any(k is None or k is NOT_CONSTANT or isinstance(k, list | dict) for k in keys):
            return NOT_CONSTANT
        if any(v is NOT_CONSTANT for v in values):
            return NOT_CONSTANT
        return dict(zip(keys, values, strict=True))

    def _unary(self, node: ast.UnaryOp, depth: int) -> Any:
        operand = self.fold(node.operand, depth)
        if operand is NOT_CONSTANT:
            return operand
        return _UNARY[type(node.op)](operand)

    def _binop(self, node: ast.BinOp, depth: int) -> Any:
        left = self.fold(node.left, depth)
        right = self.fold(node.right, depth)
        if left is NOT_CONSTANT or right is NOT_CONSTANT:
            return NOT_CONSTANT
        if isinstance(node.op, ast.Mod) and isinstance(left, str | bytes):
            return NOT_CONSTANT  # %-formatting is R06's business, never evaluate it
        if isinstance(node.op, ast.Pow) and isinstance(left, float | int) and (
                isinstance(right, float) and abs(right) > 1e6):
            return NOT_CONSTANT
        _presize(node.op, left, right, node)
        result = _SAFE_OPS[type(node.op)](left, right)
        if isinstance(result, float) and not math.isfinite(result):
            return NOT_CONSTANT
        return result

    def _joined(self, node: ast.JoinedStr, depth: int) -> Any:
        parts: list[Any] = []
        plain = True
        for value in node.values:
            if isinstance(value, ast.FormattedValue):
                plain = plain and value.format_spec is None and value.conversion == -1
                if value.format_spec is not None:
                    self.fold(value.format_spec, depth)
                value = value.value
            parts.append(self.fold(value, depth))
        if not plain or not all(isinstance(part, str) for part in parts):
            return NOT_CONSTANT
        return "".join(parts)


_HANDLERS: dict[type[ast.AST], Callable[[Folder, Any, int], Any]] = {
    ast.Constant: Folder._constant, ast.Name: Folder._name, ast.List: Folder._seq,
    ast.Tuple: Folder._seq, ast.Dict: Folder._dict, ast.UnaryOp: Folder._unary,
    ast.BinOp: Folder._binop, ast.JoinedStr: Folder._joined,
}


def fold(node: ast.AST, env: Mapping[str, Any] | None = None) -> Any:
    """Fold one expression; raises TooLarge, returns NOT_CONSTANT when not a constant."""
    return Folder(env).fold(node)


def fold_quiet(node: ast.AST, env: Mapping[str, Any] | None = None) -> Any:
    """Like fold, but a too-large value is simply not a usable constant."""
    try:
        return Folder(env).fold(node)
    except TooLarge:
        return NOT_CONSTANT

"""R06: attribute access by allowlist, and no string %-formatting.

An attribute is allowed only where the checker knows what it reaches: a CALL of a method of
plain data (``x.m(...)`` with ``m`` in ``sandbox.language.DATA_METHODS``), a LOAD of a field
of a caught CapabilityError (``e.code``), or a ctx method (R02 owns those). Everything else
is refused, whatever its name: a script never holds a coroutine's frame, the event loop or
an exception's traceback, so it has no use for any other attribute. Names are compared
after NFKC normalisation, as Python compares identifiers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, nfkc, snippet
from .builtins import DATA_METHODS, ERROR_FIELDS, REFUSED_ATTRIBUTE_REASONS
from .model import Violation
from .names import SITE, SITE_HINT
from .numeric import Numeric

_ALLOWED = ("scripts may call methods of plain data (str, list, dict, set, tuple, numbers: "
            ".get, .append, .join, .strip, .items, ...), read the fields of a caught "
            "CapabilityError (" + ", ".join(f"e.{f}" for f in sorted(ERROR_FIELDS))
            + ") and call the ctx methods")
_FSTRING_HINT = ('use an f-string with plain names: f"{name} has {count} items"; for a '
                 "remainder, make the left side a number (int(...), len(...), a loop index)")


def _r06(node: ast.AST, message: str, hint: str) -> Violation:
    return Analysis.violation("R06", node, message, hint)


def check_attributes(an: Analysis) -> Iterator[Violation]:
    for node in an.nodes(ast.Attribute):
        attr = nfkc(node.attr)
        if attr == SITE:
            yield Analysis.violation("R10", node, f"the attribute {SITE} is reserved for the "
                                     "host", SITE_HINT)
        elif not isinstance(node.ctx, ast.Load):
            verb = "assignment to" if isinstance(node.ctx, ast.Store) else "deletion of"
            yield _r06(node, f"{verb} the attribute {snippet(node)} is not allowed",
                       'keep your data in dicts and assign keys: d["field"] = value')
        elif attr.startswith("_"):
            kind = "dunder" if attr.startswith("__") else "private"
            reason = REFUSED_ATTRIBUTE_REASONS.get(attr, "reaches interpreter internals")
            yield _r06(node, f"{kind} attribute access .{attr} is not allowed ({reason})",
                       _ALLOWED)
        elif not an.model.is_ctx(node.value):  # ctx.<method> is R02's surface
            parent = an.parent(node)
            called = isinstance(parent, ast.Call) and parent.func is node
            if not ((called and attr in DATA_METHODS) or (not called and attr in ERROR_FIELDS)):
                yield _refused(node, attr)


def _refused(node: ast.Attribute, attr: str) -> Violation:
    reason = REFUSED_ATTRIBUTE_REASONS.get(attr)
    if reason is not None:
        return _r06(node, f".{attr} is refused: it {reason}", _ALLOWED)
    if attr in ERROR_FIELDS:
        return _r06(node, f".{attr} is a field of a caught error, not a method",
                    f"read it without calling it: e.{attr}")
    if attr in DATA_METHODS:
        return _r06(node, f"the method .{attr} is used without being called",
                    f"call it where you name it: {snippet(node.value, 30)}.{attr}(...); a "
                    "method is never stored, passed or returned")
    return _r06(node, f".{attr} is not an attribute scripts may use", _ALLOWED)


def check_percent_format(an: Analysis) -> Iterator[Violation]:
    """``%`` is allowed as a remainder of numbers; on anything else it is %-formatting."""
    numeric = Numeric(an.model)
    for node in an.nodes(ast.BinOp):
        if isinstance(node.op, ast.Mod) and not numeric.expr(node.left):
            yield _r06(node, f"{snippet(node.left, 40)} % ... is string %-formatting (its "
                       "left side is not provably a number)", _FSTRING_HINT)
    for aug in an.nodes(ast.AugAssign):
        if isinstance(aug.op, ast.Mod) and not numeric.expr(aug.target):
            yield _r06(aug, f"{snippet(aug.target, 40)} %= ... is string %-formatting (its "
                       "left side is not provably a number)", _FSTRING_HINT)

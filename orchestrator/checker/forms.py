"""The first wall closes two classes of bypass, each by class, not by instance (a third,
sizes given as arguments, is ``sizes.py``):

* **No text form of a non-data object** (R04): ``str()``, ``ascii()`` and f-strings of a
  function, a lambda, a coroutine (an async call not awaited), a ctx awaitable, ``ctx``
  itself or an iterator (a generator expression, ``map``, ``filter``, ``zip``,
  ``enumerate``, ``reversed``) show a memory address: it differs from run to run, so a
  payload built from it breaks replay, and it leaks the layout of the sandbox.
* **No annotation evaluated at runtime** (R11): parameter and return annotations and
  annotated assignments outside functions run when the definition runs, before and
  outside ``orchestrate``; they may only name types (names, constants, subscripts and
  ``|`` of those).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, snippet
from .model import Violation

_ITERATOR_BUILTINS = frozenset({"map", "filter", "zip", "enumerate", "reversed", "iter"})
_TEXT_BUILTINS = frozenset({"str", "ascii"})
_TYPE_NODES = (ast.Name, ast.Constant, ast.Subscript, ast.Tuple, ast.List, ast.BinOp,
               ast.BitOr, ast.Load, ast.expr_context)


def check_text_forms(an: Analysis) -> Iterator[Violation]:
    shown: list[tuple[ast.AST, ast.AST]] = []
    for call in an.nodes(ast.Call):
        if (isinstance(call.func, ast.Name) and call.func.id in _TEXT_BUILTINS and call.args
                and an.model.owner_of(call.func) is None):
            shown.append((call, call.args[0]))
    shown += [(value, value.value) for value in an.nodes(ast.FormattedValue)]
    for where, shown_value in shown:
        what = _non_data(an, shown_value, 0)
        if what is not None:
            yield Analysis.violation(
                "R04", where, f"the text form of {snippet(shown_value, 30)} ({what}) shows "
                "a memory address: it changes from run to run",
                "format data only (strings, numbers, lists and dicts of them); await a "
                "call and format its result")


def _non_data(an: Analysis, node: ast.AST, depth: int) -> str | None:
    """What non-data object ``node`` may be, or None when it is (as far as the checker
    can tell) plain data."""
    if depth > 8:
        return None
    if isinstance(node, ast.Lambda):
        return "a function"
    if isinstance(node, ast.GeneratorExp):
        return "an iterator"
    if an.model.is_ctx(node) or (isinstance(node, ast.Attribute)
                                 and an.model.is_ctx(node.value)):
        return "the ctx object"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and an.model.is_ctx(func.value):
            return "an awaitable not awaited"
        if isinstance(func, ast.Name):
            owner, bindings = an.model.bindings_of(func.id, func)
            if owner is None and func.id in _ITERATOR_BUILTINS:
                return "an iterator"
            if any(b.kind == "def" and isinstance(b.node, ast.AsyncFunctionDef)
                   for b in bindings):
                return "a coroutine not awaited"
        return None
    if isinstance(node, ast.Name):
        _, bindings = an.model.bindings_of(node.id, node)
        for binding in bindings:
            if binding.kind == "def":
                return "a function"
            if binding.value is not None and binding.kind in ("assign", "augassign"):
                found = _non_data(an, binding.value, depth + 1)
                if found is not None:
                    return found
    return None


def check_annotations(an: Analysis) -> Iterator[Violation]:
    annotations: list[ast.AST] = []
    for function in an.model.functions:
        arguments = function.args
        for param in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                      *filter(None, (arguments.vararg, arguments.kwarg))]:
            if param.annotation is not None:
                annotations.append(param.annotation)
        if function.returns is not None:
            annotations.append(function.returns)
    for assign in an.nodes(ast.AnnAssign):
        annotations.append(assign.annotation)
    for annotation in annotations:
        odd = next((n for n in ast.walk(annotation) if not isinstance(n, _TYPE_NODES)
                    or (isinstance(n, ast.BinOp) and not isinstance(n.op, ast.BitOr))), None)
        if odd is not None:
            yield Analysis.violation("R11", annotation, f"the annotation "
                                     f"{snippet(annotation, 40)} runs code when its "
                                     "definition runs (outside orchestrate)",
                                     "annotate with type names only (str, int, list[str], "
                                     "dict[str, int] | None), or leave annotations out")

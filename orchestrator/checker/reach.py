"""How many times a call can run inside its function (the host's bound on identities).

A frame from the sandbox names a site; the host admits at most as many calls at a
site in one revision as the admitted script can make there: the product, along the
site's chain, of how often each call on it can run in its own function (the static
bounds of the loops and comprehensions around it, the same ones rule R03 checks).
A sandbox that ignores the checker and invents fanout paths or occurrences gets no
more identities, and no more payments, than that.

None means unknown (a ``while`` loop, an unbounded iterable, a call inside a lambda):
such a site keeps no bound beyond the envelope's budget. Never raises: a tree the
model cannot take bounds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from .bindings import COMPREHENSIONS, FUNCTION_TYPES
from .bounds import Bounds
from .scope import ScriptModel

Executions = Callable[[ast.AST], int | None]


def executions(tree: ast.Module) -> Executions:
    """``executions(tree)(call)``: how many times ``call`` can run per run of the
    function that holds it, or None when that has no static bound."""
    try:
        model = ScriptModel(tree)
    except Exception:  # a tree past the R00 limits (checker bypassed): no bound at all
        return lambda node: None
    bounds = Bounds(model)

    def count(node: ast.AST) -> int | None:
        try:
            return _count(model, bounds, node)
        except Exception:  # the bound queries' own limits: unknown, never a crash
            return None

    return count


def _count(model: ScriptModel, bounds: Bounds, node: ast.AST) -> int | None:
    total = 1
    child, parent = node, model.parents.get(id(node))
    while parent is not None and not isinstance(parent, FUNCTION_TYPES):
        if isinstance(parent, ast.Lambda | ast.While | ast.AsyncFor):
            return None
        iterables: list[ast.expr] = []
        if isinstance(parent, ast.For) and child is not parent.iter:
            iterables = [parent.iter]
        elif isinstance(parent, COMPREHENSIONS):
            iterables = [gen.iter for gen in parent.generators]
        for iterable in iterables:
            length = bounds.length(iterable)
            if length is None:
                return None
            total *= max(length, 1)
        child, parent = parent, model.parents.get(id(parent))
    return total

"""What the admitted script can reach at each call: how often, and inside which fanouts
(the host's bounds on identities).

A frame from the sandbox names a site, a fanout path and an occurrence; the host admits
at most as many calls at a site in one revision as the admitted script can make there:
the product, along the site's chain, of how often each call on it can run in its own
function (the static bounds of the loops and comprehensions around it, the same ones
rule R03 checks), and only at fanout paths the script can give it: along the chain, the
fanouts each call runs inside (``nesting.py``), each index below the fanout's static
width (the one index of an item written in place in the fanout's list); and at one
fanout path at most the product, along the chain, of how often each call can run at one
path of its function's fanouts (an item of a list given in place to ``ctx.parallel`` /
``ctx.race`` runs in its own branch each time that fanout runs, however many items a
comprehension makes). A sandbox that ignores the checker and invents fanout paths or
occurrences gets no more identities, and no more payments, than that.

None means unknown (a ``while`` loop, an unbounded iterable, a call inside a lambda, an
awaitable handed somewhere the analysis does not follow): such a site keeps no bound
beyond the envelope's budget. Never raises: a tree the model cannot take bounds nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from .bindings import COMPREHENSIONS, FUNCTION_TYPES
from .bounds import Bounds
from .nesting import Nesting, Shapes
from .scope import ScriptModel

Executions = Callable[[ast.AST], int | None]


class Reach:
    """``executions(call)``: how many times ``call`` can run per run of the function that
    holds it; ``branch_executions(call)``: how many of those at one fanout path;
    ``nesting(node)``: the fanouts of its function an awaitable runs inside;
    ``handed(name)``, ``handed_runs(name)`` and ``handed_branch_runs(name)``: the same
    for a helper handed over as a value (a ctx.pipeline stage, a ctx.dag node). Each None
    when that has no static answer."""

    def __init__(self, tree: ast.Module) -> None:
        try:
            model = ScriptModel(tree)
        except Exception:  # a tree past the R00 limits (checker bypassed): no bound at all
            self._model: ScriptModel | None = None
            return
        self._model = model
        self._bounds = Bounds(model)
        self._nesting = Nesting(model, self._bounds)

    def executions(self, node: ast.AST) -> int | None:
        return self._ask(lambda: self._all(node))

    def branch_executions(self, node: ast.AST) -> int | None:
        """How many of those runs can be at one path of the fanouts of its function."""
        return self._ask(lambda: self._per_branch(node))

    def nesting(self, node: ast.AST) -> Shapes | None:
        return self._ask(lambda: self._nesting.of(node))

    def handed(self, name: ast.Name) -> Shapes | None:
        return self._ask(lambda: self._nesting.of_handed(name))

    def handed_runs(self, name: ast.Name) -> int | None:
        """How many times a helper handed over as a value, by this name, can run per run
        of the function that hands it: the stage or node this name is runs once each time
        the fanout it is handed to runs."""
        return self._ask(lambda: self._handed_runs(name, self._all))

    def handed_branch_runs(self, name: ast.Name) -> int | None:
        """How many of those runs can be at one fanout path (a stage or node runs at its
        own index of the fanout)."""
        return self._ask(lambda: self._handed_runs(name, self._per_branch))

    def _all(self, node: ast.AST) -> int | None:
        assert self._model is not None
        return _count(self._model, self._bounds, node)

    def _per_branch(self, node: ast.AST) -> int | None:
        # An item of a fanout's list written in place runs in a branch of its own each
        # time that fanout runs: at one path it runs as often as the fanout does, however
        # many items a comprehension makes.
        while (fanout := self._nesting.item_of(node)) is not None:
            node = fanout
        return self._all(node)

    def _handed_runs(self, name: ast.Name, count: Executions) -> int | None:
        found = self._nesting.handed_to(name)
        return None if found is None else count(found[0])

    def _ask(self, question: Callable[[], Any]) -> Any:
        if self._model is None:
            return None
        try:
            return question()
        except Exception:  # the queries' own limits: unknown, never a crash
            return None


def executions(tree: ast.Module) -> Executions:
    """``executions(tree)(call)``: how many times ``call`` can run per run of the
    function that holds it, or None when that has no static bound."""
    return Reach(tree).executions


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

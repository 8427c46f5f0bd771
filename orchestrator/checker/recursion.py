"""R12: no recursion. A reference to a script function (a call, or the function passed as a
value to ctx.pipeline / ctx.dag / sorted(key=...)) is an edge of the call graph; any cycle
is rejected. Calling a function held in a variable or a container is rejected too, because
the graph could not see that edge."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, snippet
from .bindings import FUNCTION_TYPES, FunctionNode
from .model import Violation
from .scope import ScriptModel

_HINT = ("rewrite the recursion as a for loop over a constant-bound range; helpers may call "
         "other helpers, but never back into themselves")


def _targets(model: ScriptModel, name: ast.Name, depth: int = 0) -> list[FunctionNode]:
    """Script functions a Name may refer to, following plain aliases (f = helper)."""
    if depth > 20:
        return []
    _, bindings = model.bindings_of(name.id, name)
    found: list[FunctionNode] = []
    for b in bindings:
        if b.kind == "def" and isinstance(b.node, FUNCTION_TYPES):
            found.append(b.node)
        elif b.kind == "assign" and not b.path and isinstance(b.value, ast.Name):
            found.extend(_targets(model, b.value, depth + 1))
    return found


def _edges(an: Analysis) -> dict[int, list[tuple[int, ast.AST]]]:
    edges: dict[int, list[tuple[int, ast.AST]]] = {}
    callable_names = an.model.callable_names
    for node in an.model.names:
        if node.id not in callable_names or type(node.ctx) is not ast.Load:
            continue
        scope = an.model.scope_of(node).function
        if scope is None or not isinstance(scope.node, FUNCTION_TYPES):
            continue
        for target in _targets(an.model, node):
            edges.setdefault(id(scope.node), []).append((id(target), node))
    return edges


def _components(nodes: list[int], edges: dict[int, list[tuple[int, ast.AST]]]) -> dict[int,
                                                                                      int]:
    """Strongly connected components (iterative Tarjan): node -> component id."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            succ = edges.get(node, [])
            if i < len(succ):
                work.append((node, i + 1))
                nxt = succ[i][0]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp[member] = node
                    if member == node:
                        break
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return comp


def check_recursion(an: Analysis) -> Iterator[Violation]:
    yield from _indirect_calls(an)
    edges = _edges(an)
    if not any(target in edges for targets in edges.values() for target, _ in targets):
        return  # a cycle needs an edge into a function that has edges itself
    names = {id(f): f.name for f in an.model.functions}
    comp = _components(list(names), edges)
    sizes: dict[int, int] = {}
    for c in comp.values():
        sizes[c] = sizes.get(c, 0) + 1
    for source, targets in edges.items():
        for target, ref in targets:
            if comp.get(source) != comp.get(target):
                continue
            if source != target or sizes.get(comp[source], 0) > 1:
                message = (f"{names[source]} and {names[target]} call each other "
                           "(mutual recursion)")
            else:
                message = f"{names[source]} calls itself (recursion)"
            yield Analysis.violation("R12", ref, message, _HINT)


def _indirect_calls(an: Analysis) -> Iterator[Violation]:
    for node in an.nodes(ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            continue
        if isinstance(func, ast.Name):
            owner = an.model.owner_of(func)
            if owner is None or an.model.function_def(func) is not None:
                continue  # a builtin (R07 names undefined ones) or a helper called by name
            if all(b.kind == "def" for b in owner.bindings[func.id]) or _targets(
                    an.model, func):
                continue
        yield Analysis.violation("R12", node, f"{snippet(func)}(...) calls a value, not a "
                                 "function defined by name",
                                 "call helpers directly by their def name: await helper(...)")

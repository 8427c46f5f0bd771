"""Which fanouts an awaitable runs inside, within its own function (the host's bound on
fanout paths).

A call's fanout path holds one branch index per fanout around the *task* that runs it:
``await x`` runs ``x`` in the awaiting task; an item of the list given to ``ctx.parallel``
or ``ctx.race`` runs in a branch of its own, one index deeper, below the width of that
list; a helper handed to ``ctx.pipeline`` / ``ctx.dag`` runs as a stage or node, one index
deeper. ``Nesting.of(node)`` answers, for a capability call, a helper call or a fanout
call, the fanouts of its own function it ends up inside, following it through one local
name (``c = helper(); await c``) or one local list (``tasks.append(helper()); await
ctx.parallel(tasks)``), as a set of alternatives ("shapes"): each shape one
``(width, race, item)`` per fanout, outermost first, ``width`` the static bound of the
branch list (None when it has none), ``race`` the ``ctx.race`` call for a race, and
``item`` the one branch index of an item written in place in the fanout's own list
without a ``*`` item (None: any index below the width).

None means the awaitable goes somewhere this analysis does not follow (returned, passed
to a function, stored in a dict, read from a closure): then nothing is claimed and the
host bounds the site by its call count and the envelope's budget only. The answer for
what is followed is an over-approximation: every path the runtime can give the call is
one of the shapes. Never raises.
"""

from __future__ import annotations

import ast
from typing import TypeGuard

from orchestrator.site_paths import capped

from .bounds import Bounds
from .scope import Scope, ScriptModel

Branch = tuple[int | None, ast.Call | None, int | None]  # (width, ctx.race call, item)
Shapes = frozenset[tuple[Branch, ...]]

_MAX_HOPS = 24  # fanouts and names followed for one awaitable
_LISTED = ("parallel", "race")  # ctx methods that take a list of awaitables
_LIST_USES = frozenset({"append", "insert", "extend"})  # list methods that only add
_FRESH = (ast.List, ast.Tuple, ast.ListComp)
_TOP: Shapes = frozenset({()})


class Nesting:
    """Memoised nesting queries over one ScriptModel."""

    def __init__(self, model: ScriptModel, bounds: Bounds) -> None:
        self.m = model
        self.bounds = bounds
        self._loads: dict[tuple[int, str], list[ast.Name]] = {}
        for name in model.names:
            if isinstance(name.ctx, ast.Load):
                owner = model.owner_of(name)
                if owner is not None:
                    self._loads.setdefault((id(owner), name.id), []).append(name)

    def of(self, node: ast.AST, hops: int = 0) -> Shapes | None:
        """The fanouts of its own function that the awaitable ``node`` runs inside."""
        if hops > _MAX_HOPS:
            return None
        parent = self.m.parent(node)
        if isinstance(parent, ast.Await):
            return _TOP
        if isinstance(parent, ast.IfExp) and node is not parent.test:
            return self.of(parent, hops + 1)
        if isinstance(parent, ast.List | ast.Tuple) and isinstance(parent.ctx, ast.Load):
            if any(isinstance(e, ast.Starred) for e in parent.elts):
                return self._held(parent, None, hops)
            index = next(i for i, e in enumerate(parent.elts) if e is node)
            return self._held(parent, len(parent.elts), hops, index)
        if isinstance(parent, ast.ListComp) and parent.elt is node:
            return self._held(parent, self.bounds.length(parent), hops)
        if isinstance(parent, ast.Call) and _adds(parent, node):
            receiver = parent.func.value  # type: ignore[attr-defined]
            return self._list(receiver, hops) if isinstance(receiver, ast.Name) else None
        if isinstance(parent, ast.Assign) and parent.value is node:
            target = _single_name(parent.targets)
            return None if target is None else self._name(target, hops)
        return None

    def item_of(self, node: ast.AST) -> ast.Call | None:
        """The ``ctx.parallel`` / ``ctx.race`` whose list, written in place, holds the
        awaitable ``node`` as an item (a display's or a comprehension's): each run of that
        fanout runs ``node`` at most once in each of its branches."""
        parent = self.m.parent(node)
        while isinstance(parent, ast.IfExp) and node is not parent.test:
            node, parent = parent, self.m.parent(parent)
        if not ((isinstance(parent, ast.List | ast.Tuple) and isinstance(parent.ctx, ast.Load))
                or (isinstance(parent, ast.ListComp) and parent.elt is node)):
            return None
        user = self.m.parent(parent)
        return user if self._fanout(user, parent, _LISTED) else None

    def of_handed(self, name: ast.Name) -> Shapes | None:
        """A helper handed over by name runs one index deeper than the fanout it is
        handed to (``handed_to``)."""
        found = self.handed_to(name)
        return None if found is None else self._inside(found[0], found[1], 0)

    def handed_to(self, name: ast.Name) -> tuple[ast.Call, int | None] | None:
        """The ``ctx.pipeline([...])`` a helper is a stage of, or the ``ctx.dag({...:
        (helper, [...])})`` it is a node function of, with its number of stages or nodes
        (None: no static count)."""
        holder = self.m.parent(name)
        if not isinstance(holder, ast.List | ast.Tuple):
            return None
        user = self.m.parent(holder)
        if self._fanout(user, holder, ("pipeline",)):
            starred = any(isinstance(e, ast.Starred) for e in holder.elts)
            return user, None if starred else len(holder.elts)
        table = user if holder.elts[:1] == [name] else None
        if isinstance(table, ast.Dict) and holder in table.values:
            fanout = self.m.parent(table)
            if self._fanout(fanout, table, ("dag",)):
                unpacked = any(key is None for key in table.keys)
                return fanout, None if unpacked else len(table.keys)
        return None

    # ---- where a holder goes --------------------------------------------------------

    def _held(self, holder: ast.expr, width: int | None, hops: int,
              index: int | None = None) -> Shapes | None:
        """An awaitable is an item of ``holder`` (a list display or comprehension), at
        ``index`` of a display: its branch index when the display is the fanout's list
        itself (a list put in a variable may be grown in front of it)."""
        user = self.m.parent(holder)
        if self._fanout(user, holder, _LISTED):
            return self._inside(user, width, hops, index)
        if isinstance(user, ast.Assign) and user.value is holder:
            target = _single_name(user.targets)
        elif isinstance(user, ast.AugAssign) and user.value is holder and isinstance(
                user.op, ast.Add):
            target = user.target if isinstance(user.target, ast.Name) else None
        elif isinstance(user, ast.Call) and _adds(user, holder):
            receiver = user.func.value  # type: ignore[attr-defined]
            target = receiver if isinstance(receiver, ast.Name) else None
        else:
            target = None
        return None if target is None else self._list(target, hops)

    def _inside(self, fanout: ast.Call, width: int | None, hops: int,
                index: int | None = None) -> Shapes | None:
        outer = self.of(fanout, hops + 1)
        if outer is None:
            return None
        race = fanout if isinstance(fanout.func, ast.Attribute) and \
            fanout.func.attr == "race" else None
        return capped((*shape, (width, race, index)) for shape in outer)

    def _list(self, name: ast.Name, hops: int) -> Shapes | None:
        """Items put into the local list ``name``: the fanouts the list is given to. The
        list is the function's own (every binding a fresh display), and every use of it
        only adds to it, measures it, or hands it to ``ctx.parallel`` / ``ctx.race``."""
        owner = self._local(name)
        if owner is None or not all(
                (b.kind == "assign" and not b.path and isinstance(b.value, _FRESH))
                or b.kind == "augassign" for b in owner.bindings[name.id]):
            return None
        found: set[tuple[Branch, ...]] = set()
        for load in self._loads.get((id(owner), name.id), []):
            use = self.m.parent(load)
            if self._fanout(use, load, _LISTED):
                inside = self._inside(use, self.bounds.length(load), hops + 1)
                if inside is None:
                    return None
                found |= inside
            elif not (_only_adds_to(use, load, self.m) or self._measures(use, load)):
                return None
        return capped(found)

    def _name(self, name: ast.Name, hops: int) -> Shapes | None:
        """``c = <awaitable>``: wherever the function reads ``c``."""
        owner = self._local(name)
        if owner is None:
            return None
        found: set[tuple[Branch, ...]] = set()
        for load in self._loads.get((id(owner), name.id), []):
            inside = self.of(load, hops + 1)
            if inside is None:
                return None
            found |= inside
        return capped(found)

    # ---- small questions ------------------------------------------------------------

    def _local(self, name: ast.Name) -> Scope | None:
        """The function scope that binds ``name``, when no other function reads it."""
        owner = self.m.owner_of(name)
        if owner is None or owner.kind != "function":
            return None
        for load in self._loads.get((id(owner), name.id), []):
            if self.m.scope_of(load).function is not owner:
                return None  # read from a nested function: it may run anywhere
        return owner

    def _fanout(self, user: ast.AST | None, first: ast.AST, methods: tuple[str, ...]
                ) -> TypeGuard[ast.Call]:
        """``ctx.<one of methods>(first, ...)``."""
        return (isinstance(user, ast.Call) and isinstance(user.func, ast.Attribute)
                and user.func.attr in methods and self.m.is_ctx(user.func.value)
                and bool(user.args) and user.args[0] is first)

    def _measures(self, use: ast.AST | None, load: ast.Name) -> bool:
        return (isinstance(use, ast.Call) and self.m.is_builtin_ref(use.func, "len")
                and use.args == [load])


def _adds(call: ast.Call, item: ast.AST) -> bool:
    """``name.append(item)``, ``name.insert(i, item)`` or ``name.extend(item)``."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and not call.keywords):
        return False
    if func.attr == "insert":
        return len(call.args) == 2 and call.args[1] is item
    return func.attr in ("append", "extend") and call.args == [item]


def _only_adds_to(use: ast.AST | None, load: ast.Name, model: ScriptModel) -> bool:
    """``load.append(...)`` / ``insert`` / ``extend``: the list grows, nothing leaves it."""
    return (isinstance(use, ast.Attribute) and use.value is load and use.attr in _LIST_USES
            and model.call_of(use) is not None)


def _single_name(targets: list[ast.expr]) -> ast.Name | None:
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0]
    return None

"""The fanout paths at which the admitted script can make a site's calls (pure).

A call's fanout path holds one branch index per fanout around it. For each site the
host keeps the *shapes* its paths can take: each shape one ``Branching`` per fanout,
outermost first, with the fanout's static width (None when it has none), the one index
of an item written in place in the fanout's list (None: any index below the width) and,
for a ``ctx.race``, the race's own site (a replayed race runs its winner at the branch
index committed for it, which an earlier, wider race may have given). A site's shapes are
built along its chain: the fanouts each call on the chain runs inside, in its own
function (``orchestrator.checker.nesting``), joined outermost first. ``None`` means the
paths of the site have no static shape: only its call count and the envelope's budget
bound it there.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

MAX_SHAPES = 16  # alternatives a site keeps before it has no static shape (None)


class Branching(NamedTuple):
    width: int | None  # the fanout's branches at most; None: no static bound
    race: str | None = None  # the site of the ctx.race, when the fanout is one
    item: int | None = None  # the one index of an item written in place; None: any below width


Shape = tuple[Branching, ...]
Shapes = frozenset[Shape]
TOP: Shapes = frozenset({()})  # orchestrate runs in no fanout


# The fanouts of its function an awaitable runs inside, as (width, ctx.race call or None,
# item index or None) per fanout, outermost first, one tuple per alternative; None: not known
# statically (``orchestrator.checker.nesting``).
Link = frozenset[tuple[tuple[int | None, Any, int | None], ...]] | None


def join(outer: Shapes | None, link: Link,
         race_site: Callable[[ast.Call], str | None]) -> Shapes | None:
    """The shapes of a call whose caller runs at ``outer`` and that itself runs inside
    the fanouts ``link`` of its caller's function (each ``(width, ctx.race call or None,
    item index)``; races named by ``race_site``)."""
    if outer is None or link is None:
        return None
    inner = {tuple(Branching(width, None if race is None else race_site(race), item)
                   for width, race, item in shape) for shape in link}
    return capped(head + tail for head in outer for tail in inner)


def merge(a: Shapes | None, b: Shapes | None) -> Shapes | None:
    """A site reached on two ways: either way's shapes."""
    return None if a is None or b is None else capped(a | b)


T = TypeVar("T")


def capped(shapes: Iterable[T]) -> frozenset[T] | None:
    found = frozenset(shapes)
    return found if len(found) <= MAX_SHAPES else None


def frozen(shapes: Shapes | None) -> tuple[Shape, ...] | None:
    """The shapes as a site stores them: a sorted tuple (deterministic on the wire)."""
    if shapes is None:
        return None
    return tuple(sorted(shapes, key=lambda shape: [(-1 if b.width is None else b.width,
                                                     b.race or "",
                                                     -1 if b.item is None else b.item)
                                                    for b in shape]))


def from_json(data: Any) -> tuple[Shape, ...] | None:
    """A site's shapes as ``Admission.to_wire`` wrote them (lists for tuples; a branching
    written before it had an item index has two fields)."""
    if data is None:
        return None
    return tuple(tuple(Branching(*branch) for branch in shape) for shape in data)


def fits(shape: Shape, path: list[int] | tuple[int, ...],
         raced: Callable[[str], frozenset[int]]) -> bool:
    """Is ``path`` one of the paths of ``shape``? ``raced(site)``: the branch indices
    committed for the race at ``site`` (a replayed winner keeps its committed index)."""
    return len(shape) == len(path) and all(
        _admits(branch, index) or (branch.race is not None and index in raced(branch.race))
        for branch, index in zip(shape, path, strict=True))


def _admits(branch: Branching, index: int) -> bool:
    if branch.item is not None:
        return index == branch.item
    return branch.width is None or index < branch.width


def describe(shapes: tuple[Shape, ...]) -> str:
    """``[<4][1]`` for a path of two elements, the first below 4, the second 1; ``[]``
    outside any fanout; alternatives joined by " or "."""
    if not shapes:
        return "nowhere (the script never awaits it)"
    return " or ".join("".join(_described(b) for b in shape) or "[]" for shape in shapes)


def _described(branch: Branching) -> str:
    if branch.item is not None:
        return f"[{branch.item}]"
    return f"[<{branch.width}]" if branch.width is not None else "[any]"

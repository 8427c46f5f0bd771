"""R05: guarded fanout. The width of every fanout must have a static bound, also when the
list of branches is built in a variable first (the indirect case the paper's mutation
study found missing)."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from sandbox.language import LIMITS

from .analysis import Analysis, snippet
from .model import Violation

MAX_FANOUT = LIMITS["fanout_width"]
_FANOUT = ("parallel", "race", "dag", "pipeline")
_HINT = ("build the branches from a constant-bound iterable, e.g. await ctx.parallel("
         "[gen(ctx, s) for s in args[\"shots\"][:4]]), or a list literal; a list variable is "
         "fine when every assignment and .append to it is bounded the same way")


def check_fanout(an: Analysis) -> Iterator[Violation]:
    for call, method in an.ctx_calls(*_FANOUT):
        if not call.args or isinstance(call.args[0], ast.Starred):
            continue  # R02 reports the malformed call
        branches = call.args[0]
        width = an.bounds.length(branches)
        what = "stages" if method == "pipeline" else "branches"
        if width is None:
            via = (f" (the variable {branches.id} is not statically bounded)"
                   if isinstance(branches, ast.Name) else "")
            yield Analysis.violation("R05", call, f"ctx.{method} over {snippet(branches)} has "
                                     f"no static bound on its {what}{via}", _HINT)
        elif width > MAX_FANOUT:
            yield Analysis.violation("R05", call, f"ctx.{method} may start {width} {what} "
                                     f"(limit {MAX_FANOUT})",
                                     f"use a smaller constant bound (at most {MAX_FANOUT})")

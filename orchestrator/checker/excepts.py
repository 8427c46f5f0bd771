"""R09: no broad except. A script catches provider failures by name, never everything."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, snippet
from .builtins import CATCHABLE_ERRORS
from .model import Violation

_BROAD = frozenset({"Exception", "BaseException"})
_HINT = ("catch a specific error by name, e.g. except CapabilityError as e:; catchable "
         f"names are {', '.join(sorted(CATCHABLE_ERRORS))}")


def check_excepts(an: Analysis) -> Iterator[Violation]:
    for node in an.nodes(ast.TryStar):
        yield Analysis.violation("R09", node, "try/except* is not allowed",
                                 "use try: ... except CapabilityError as e: ...")
    for handler in an.nodes(ast.ExceptHandler):
        yield from _handler(handler)


def _handler(node: ast.ExceptHandler) -> Iterator[Violation]:
    if node.type is None:
        yield Analysis.violation("R09", node, "bare except: catches everything", _HINT)
        return
    names = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
    for name in names:
        if isinstance(name, ast.Name) and name.id in _BROAD:
            yield Analysis.violation("R09", node, f"except {name.id} is too broad", _HINT)
        elif not isinstance(name, ast.Name) or name.id not in CATCHABLE_ERRORS:
            yield Analysis.violation("R09", node,
                                     f"except {snippet(name)} is not a catchable error name",
                                     _HINT)

"""A package's public names, loaded from their modules on first use.

Each package's ``__init__`` imports its API under ``TYPE_CHECKING`` (so type checkers
and linters see every name as it is), lists it in ``__all__``, and sets
``__getattr__ = lazy_exports(__name__, __file__)`` (PEP 562): a name is loaded from the
module that ``TYPE_CHECKING`` block imports it from, when it is first used. Importing
one module of a package must not load every module the package exports (``revise
--help`` imports ``broker.errors`` and must not pay for SQLAlchemy, pydantic settings
or the HTTP client); the block is the one place that says where each name lives.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

from broker.syntax import parse_python


def type_checking_imports(init_file: str | Path) -> dict[str, str]:
    """{name: module} for every ``from MODULE import NAME`` under ``if TYPE_CHECKING:``."""
    tree = parse_python(Path(init_file).read_text(encoding="utf-8"))
    homes: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) \
                and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    homes |= {alias.asname or alias.name: statement.module
                              for alias in statement.names}
    return homes


def lazy_exports(package: str, init_file: str) -> Callable[[str], object]:
    """The package's ``__getattr__``: a name comes from its module, once (it is then set
    on the package, so the next access does not come back here)."""
    homes: dict[str, str] = {}

    def __getattr__(name: str) -> object:
        if not homes:
            homes.update(type_checking_imports(init_file))
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(homes[name]), name)
        setattr(import_module(package), name, value)
        return value

    return __getattr__

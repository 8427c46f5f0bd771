"""The nouns of the script model: scopes, name bindings, collection mutations."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

from .builtins import GROW_MANY_METHODS, GROW_ONE_METHODS

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
FUNCTION_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
# An enclosing loop: the iterable it runs over (None for `while`), evaluated in its own scope.
Loop = ast.expr | None


@dataclass(eq=False)
class Scope:
    node: ast.AST
    kind: str  # "module" | "function" | "comprehension" | "lambda"
    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)

    def bind(self, name: str, binding: Binding) -> None:
        self.bindings.setdefault(name, []).append(binding)

    @property
    def function(self) -> Scope | None:
        """The nearest function (or module) scope: comprehensions are transparent."""
        scope: Scope | None = self
        while scope is not None and scope.kind == "comprehension":
            scope = scope.parent
        return scope


@dataclass(frozen=True, eq=False)
class Binding:
    kind: str  # param | assign | augassign | for | comp | except | def | import | other
    node: ast.AST
    value: ast.AST | None = None
    path: tuple[int, ...] = ()
    loops: tuple[Loop, ...] = ()
    index: int = -1  # parameter position


@dataclass(frozen=True, eq=False)
class Mutation:
    name: str
    method: str  # list/dict method name, or "[]=" for a subscript store
    call: ast.AST
    arg: ast.expr | None
    loops: tuple[Loop, ...]
    scope: Scope

    @property
    def grows_by_one(self) -> bool:
        return self.method in GROW_ONE_METHODS or self.method == "[]="

    @property
    def grows_by_many(self) -> bool:
        return self.method in GROW_MANY_METHODS


def target_names(target: ast.AST, path: tuple[int, ...] = ()) -> Iterator[
        tuple[ast.Name, tuple[int, ...]]]:
    """Yield (Name node, unpack path) for every name an assignment target binds."""
    if isinstance(target, ast.Name):
        yield target, path
    elif isinstance(target, ast.Tuple | ast.List):
        for i, elt in enumerate(target.elts):
            yield from target_names(elt, (*path, i))
    elif isinstance(target, ast.Starred):
        yield from target_names(target.value, (*path, -1))


def positional_params(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    return [*node.args.posonlyargs, *node.args.args]


def all_params(node: FunctionNode | ast.Lambda) -> list[ast.arg]:
    a = node.args
    extra = [p for p in (a.vararg, a.kwarg) if p is not None]
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *extra]

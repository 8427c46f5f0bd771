"""Is an expression provably a number? (for R06: ``%`` is a remainder only on numbers).

Conservative by construction: an answer of True is a proof from the syntax (number
literals, arithmetic on numbers, builtins that return numbers, names whose every binding
is numeric, ``range``/``enumerate`` loop indices); anything unknown is False.
"""

from __future__ import annotations

import ast

from .bindings import FUNCTION_TYPES, Binding
from .scope import ScriptModel

# Builtins that return a number (or a tuple of numbers) whatever plain data they get.
NUMERIC_BUILTINS = frozenset({"int", "float", "len", "abs", "round", "sum", "divmod", "ord"})
# min/max return one of their arguments: numeric only when every argument is.
CHOOSING_BUILTINS = frozenset({"min", "max"})
# Data methods that return an int on every receiver that has them.
COUNTING_METHODS = frozenset({"count", "find", "rfind", "index", "rindex", "bit_length"})
# How many names deep a proof may go (a = b + 1; b = c + 1; ...), and how many names one
# script may ask about, before giving up (not proven).
MAX_DEPTH = 60
MAX_STEPS = 5_000


class Numeric:
    """Memoised "provably numeric" queries over one ScriptModel."""

    def __init__(self, model: ScriptModel) -> None:
        self.m = model
        self._names: dict[tuple[int, str], bool] = {}
        self._busy: set[tuple[int, str]] = set()
        self._hits: set[tuple[int, str]] = set()
        self._steps = 0

    def expr(self, node: ast.AST | None) -> bool:
        if isinstance(node, ast.Constant):
            return isinstance(node.value, int | float)
        if isinstance(node, ast.Name):
            return self.name(node)
        if isinstance(node, ast.UnaryOp):
            return isinstance(node.op, ast.Not) or self.expr(node.operand)
        if isinstance(node, ast.BinOp):
            return (not isinstance(node.op, ast.MatMult) and self.expr(node.left)
                    and self.expr(node.right))
        if isinstance(node, ast.Compare):
            return True
        if isinstance(node, ast.BoolOp):
            return all(self.expr(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.expr(node.body) and self.expr(node.orelse)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Subscript):
            return self._constant_item(node)
        return False

    def _constant_item(self, node: ast.Subscript) -> bool:
        """``SIZES[i]`` where the top-level constant holds only numbers (one level)."""
        root = node.value
        if not (isinstance(root, ast.Name) and self.m.owner_of(root) is self.m.module):
            return False
        value = self.m.env.get(root.id)
        if not isinstance(value, list | tuple | dict) or not value:
            return False
        items = value.values() if isinstance(value, dict) else value
        return all(isinstance(v, int | float) for v in items)

    def _call(self, node: ast.Call) -> bool:
        func = node.func
        if isinstance(func, ast.Attribute):
            return func.attr in COUNTING_METHODS and not self.m.is_ctx(func.value)
        builtin = self.m.builtin_name(func)
        if builtin in NUMERIC_BUILTINS:
            return True
        if builtin in CHOOSING_BUILTINS:
            return bool(node.args) and not node.keywords and all(
                self.expr(a) for a in node.args)
        return False

    def name(self, node: ast.Name) -> bool:
        owner, bindings = self.m.bindings_of(node.id, node)
        if owner is None:
            return False
        if owner is self.m.module:
            value = self.m.env.get(node.id)
            return isinstance(value, int | float) and len(bindings) == 1
        key = (id(owner), node.id)
        if key in self._names:
            return self._names[key]
        if key in self._busy:
            # Met again while being proven (total = total + len(s)): assume it, as an
            # induction over the run: every value the name takes comes from a binding.
            self._hits.add(key)
            return True
        if len(self._busy) >= MAX_DEPTH or self._steps >= MAX_STEPS:
            return False  # too long a chain of names to follow: not proven
        self._steps += 1
        self._busy.add(key)
        outer, self._hits = self._hits, set()
        try:
            result = all(self._binding(b) for b in bindings)
        finally:
            self._busy.discard(key)
            leaned = self._hits - {key}
            self._hits = outer | leaned
        if not leaned:  # a proof that leans on an unfinished outer one is not kept
            self._names[key] = result
        return result

    def _binding(self, binding: Binding) -> bool:
        value = binding.value
        if binding.kind == "augassign":
            return self.expr(value)
        if binding.kind == "assign":
            return self._element(value, binding.path)
        if binding.kind in ("for", "comp") and isinstance(value, ast.Call) and not value.keywords:
            builtin = self.m.builtin_name(value.func)
            return (builtin == "range" and binding.path == ()) or (
                builtin == "enumerate" and binding.path == (0,))
        if binding.kind == "param":
            return self._param(binding)
        return False

    def _element(self, value: ast.AST | None, path: tuple[int, ...]) -> bool:
        for step in path:
            if isinstance(value, ast.Call) and self.m.builtin_name(value.func) == "divmod":
                return len(path) == 1
            if not isinstance(value, ast.Tuple | ast.List) or step < 0 or step >= len(
                    value.elts) or any(isinstance(e, ast.Starred) for e in value.elts):
                return False
            value = value.elts[step]
        return self.expr(value)

    def _param(self, binding: Binding) -> bool:
        """A helper parameter is numeric when every call site passes a number."""
        func = binding.node
        if (not isinstance(func, FUNCTION_TYPES) or func is self.m.orchestrate
                or id(func) in self.m.escaped_functions):
            return False
        calls = self.m.calls_to(func)
        if not calls:
            return False
        positional = [*func.args.posonlyargs, *func.args.args]
        if binding.index >= len(positional):
            return False
        name = positional[binding.index].arg
        for call in calls:
            if any(isinstance(a, ast.Starred) for a in call.args) or any(
                    k.arg is None for k in call.keywords):
                return False
            if binding.index < len(call.args):
                arg: ast.AST | None = call.args[binding.index]
            else:
                arg = next((k.value for k in call.keywords if k.arg == name), None)
            if not self.expr(arg):
                return False
        return True

"""Static upper bounds: how many items an iterable can yield, and what range an int spans.

Every answer is an *upper bound* or ``None`` ("no static bound"). The analysis follows
literals, top-level constants, ``range``, constant-bound slices, ``len``/``min``/``max``
arithmetic, local names through all of their bindings (a list grows by one per ``append``
times the bounds of the loops around it), and helper parameters through every call site.
A cycle (a list extended while iterating over itself) has no bound, by construction.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

from .builtins import SAME_LENGTH_CALLS, SAME_LENGTH_METHODS, SET_BUILDERS
from .consts import fold_quiet, is_int
from .intervals import (
    UNKNOWN,
    Interval,
    add,
    dec,
    max_bound,
    max_of,
    mul,
    neg,
    sum_bound,
    union,
)
from .scope import COMPREHENSIONS, Binding, FunctionNode, Loop, Scope, ScriptModel, all_params

MAX_STEPS = 200_000
MAX_DEPTH = 150

class Bounds:
    """Memoised bound queries over one ScriptModel."""

    def __init__(self, model: ScriptModel) -> None:
        self.m = model
        self._memo: dict[tuple[Any, ...], Any] = {}
        self._busy: set[tuple[Any, ...]] = set()
        self._steps = 0
        self._depth = 0

    @cached_property
    def _escaped(self) -> set[tuple[int, str]]:
        return self._names_passed_to_mutators()

    def _guard(self, key: tuple[Any, ...], compute: Callable[[], Any], default: Any) -> Any:
        if key in self._memo:
            return self._memo[key]
        if key in self._busy or self._steps > MAX_STEPS or self._depth > MAX_DEPTH:
            return default  # a cycle or an exhausted budget: no static bound
        self._busy.add(key)
        self._steps += 1
        self._depth += 1
        try:
            result = compute()
        finally:
            self._busy.discard(key)
            self._depth -= 1
        self._memo[key] = result
        return result

    def _names_passed_to_mutators(self) -> set[tuple[int, str]]:
        escaped: set[tuple[int, str]] = set()
        for func_id in self.m.mutating_functions:
            for call in self.m.call_sites.get(func_id, []):
                for arg in [*call.args, *(k.value for k in call.keywords)]:
                    if isinstance(arg, ast.Starred):
                        arg = arg.value
                    if isinstance(arg, ast.Name):
                        owner = self.m.owner_of(arg)
                        if owner is not None:
                            escaped.add((id(owner), arg.id))
        return escaped

    # ---- lengths -----------------------------------------------------------------------

    def length(self, node: ast.AST | None) -> int | None:
        if node is None:
            return None
        key = ("len", id(node))
        if key in self._memo:
            return self._memo[key]  # type: ignore[no-any-return]
        if isinstance(node, ast.Constant):  # a leaf: nothing to guard
            return len(node.value) if isinstance(node.value, str | bytes) else None
        return self._guard(key, lambda: self._length(node), None)

    def _length(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Constant):
            return len(node.value) if isinstance(node.value, str | bytes) else None
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return sum_bound(self.length(e.value) if isinstance(e, ast.Starred) else 1
                             for e in node.elts)
        if isinstance(node, ast.Dict):
            return sum_bound(1 if k is not None else self.length(v)
                             for k, v in zip(node.keys, node.values, strict=True))
        if isinstance(node, COMPREHENSIONS):
            return self.multiplicity([gen.iter for gen in node.generators])
        handler = _LENGTH_HANDLERS.get(type(node))
        return handler(self, node) if handler is not None else None

    def _await_length(self, node: ast.Await) -> int | None:
        return self.length(node.value)

    def _binop_length(self, node: ast.BinOp) -> int | None:
        if isinstance(node.op, ast.Add):
            return sum_bound([self.length(node.left), self.length(node.right)])
        if isinstance(node.op, ast.Mult):
            for seq, count in ((node.left, node.right), (node.right, node.left)):
                size, (_, times) = self.length(seq), self.interval(count)
                if size is not None and times is not None:
                    return size * max(times, 0)
        return None

    def _choice_length(self, node: ast.IfExp | ast.BoolOp) -> int | None:
        parts = [node.body, node.orelse] if isinstance(node, ast.IfExp) else node.values
        return max_bound(self.length(p) for p in parts)

    def _subscript_length(self, node: ast.Subscript) -> int | None:
        whole = self.length(node.value)
        if not isinstance(node.slice, ast.Slice):
            return self._module_constant_length(node)
        span = self.slice_span(node.slice)
        if span is None:
            return whole
        return span if whole is None else min(span, whole)

    def _module_constant_length(self, node: ast.AST) -> int | None:
        root = node
        while isinstance(root, ast.Subscript):
            root = root.value
        if not isinstance(root, ast.Name) or self.m.owner_of(root) is not self.m.module:
            return None
        keys: list[ast.AST] = []
        current: ast.AST = node
        while isinstance(current, ast.Subscript):
            keys.append(current.slice)
            current = current.value
        value = self.m.env.get(root.id)
        for key in reversed(keys):
            try:
                value = value[fold_quiet(key, self.m.env)]  # type: ignore[index]
            except (KeyError, IndexError, TypeError):
                return None
        return len(value) if isinstance(value, str | list | tuple | dict) else None

    def slice_span(self, sl: ast.Slice) -> int | None:
        """How many items ``x[lower:upper:step]`` can hold whatever the length of ``x``."""
        step = 1 if sl.step is None else fold_quiet(sl.step, self.m.env)
        if not is_int(step) or step <= 0:
            return None
        lo_l, hi_l = (0, 0) if sl.lower is None else self.interval(sl.lower)
        if sl.upper is None:
            span = -lo_l if (hi_l is not None and hi_l < 0 and lo_l is not None) else None
        else:
            lo_u, hi_u = self.interval(sl.upper)
            if lo_u is not None and lo_u >= 0 and hi_u is not None:
                start = lo_l if (lo_l is not None and lo_l >= 0) else 0
                span = max(hi_u - start, 0)
            elif hi_u is not None and hi_u < 0 and hi_l is not None and hi_l < 0:
                span = max(hi_u - lo_l, 0) if lo_l is not None else None
            else:
                span = None
        return None if span is None else math.ceil(span / step)

    def _call_length(self, node: ast.Call) -> int | None:
        func = node.func
        if any(isinstance(a, ast.Starred) for a in node.args):
            return None
        if isinstance(func, ast.Name) and self.m.owner_of(func) is None:
            if func.id == "range":
                return self.range_count(node)
            if func.id in SAME_LENGTH_CALLS or func.id in SET_BUILDERS:
                extra = len(node.keywords) if func.id == "dict" else 0
                return sum_bound([self.length(node.args[0]) if node.args else 0, extra])
            if func.id == "zip":
                known = [n for n in (self.length(a) for a in node.args) if n is not None]
                return min(known) if known else None
            return None
        if isinstance(func, ast.Attribute):
            if self.m.is_ctx(func.value):
                if func.attr in ("parallel", "dag") and node.args:
                    return self.length(node.args[0])
                return None
            if func.attr in SAME_LENGTH_METHODS and not node.args:
                return self.length(func.value)
        return None

    def range_count(self, node: ast.Call) -> int | None:
        args = node.args
        if node.keywords or not 1 <= len(args) <= 3:
            return None
        if len(args) == 1:
            hi = self.interval(args[0])[1]
            return None if hi is None else max(hi, 0)
        step = 1 if len(args) == 2 else fold_quiet(args[2], self.m.env)
        if not is_int(step) or step == 0:
            return None
        (lo_a, hi_a), (lo_b, hi_b) = self.interval(args[0]), self.interval(args[1])
        if step > 0:
            span = None if (hi_b is None or lo_a is None) else hi_b - lo_a
        else:
            span = None if (hi_a is None or lo_b is None) else hi_a - lo_b
        return None if span is None else max(math.ceil(span / abs(step)), 0)

    def multiplicity(self, loops: Iterable[Loop]) -> int | None:
        """How many times code inside these loops can run (the product of their bounds)."""
        total = 1
        for loop in loops:
            count = None if loop is None else self.length(loop)
            if count is None:
                return None
            total *= count
        return total

    # ---- names -------------------------------------------------------------------------

    def _name_length(self, node: ast.Name) -> int | None:
        owner, bindings = self.m.bindings_of(node.id, node)
        if owner is None:
            return None
        if owner is self.m.module:
            value = self.m.env.get(node.id)
            return len(value) if isinstance(value, str | list | tuple | dict) else None
        key = ("name-len", id(owner), node.id)
        return self._guard(key, lambda: self._local_length(owner, node.id, bindings), None)

    def _local_length(self, owner: Scope, name: str, bindings: list[Binding]) -> int | None:
        if (id(owner), name) in self.m.closure_mutated or (id(owner), name) in self._escaped:
            return None
        base = max_bound(self._binding_length(b) for b in bindings if b.kind != "augassign")
        growth = [self._growth(owner, name)]
        growth += [self._growth(owner, alias) for alias in self._aliases(owner, name)]
        total = sum_bound(growth)
        return None if base is None or total is None else base + total

    def _aliases(self, owner: Scope, name: str) -> list[str]:
        return [other for other, bs in owner.bindings.items() if other != name and any(
            b.kind == "assign" and not b.path and isinstance(b.value, ast.Name)
            and b.value.id == name for b in bs)]

    def _growth(self, owner: Scope, name: str) -> int | None:
        parts: list[int | None] = []
        for b in owner.bindings.get(name, []):
            if b.kind == "augassign":
                ok = isinstance(b.node, ast.AugAssign) and isinstance(b.node.op, ast.Add)
                size = self.length(b.value) if ok else None
                parts.append(mul(size, self.multiplicity(b.loops)))
        for mutation in self.m.mutations_by_owner.get((id(owner), name), []):
            if mutation.grows_by_one:
                parts.append(self.multiplicity(mutation.loops))
            elif mutation.grows_by_many:
                parts.append(mul(self.length(mutation.arg), self.multiplicity(mutation.loops)))
        return sum_bound(parts)

    def _binding_length(self, binding: Binding) -> int | None:
        if binding.kind == "param":
            return self._param_query(binding, self.length, max_of)
        if binding.kind == "assign":
            return self._path(binding.value, binding.path, self.length)
        if binding.kind in ("for", "comp") and isinstance(binding.value, ast.List | ast.Tuple):
            return max_bound(self._path(e, binding.path, self.length) for e in binding.value.elts)
        return None

    def _path(self, value: ast.AST | None, path: tuple[int, ...], query: Callable) -> Any:
        while path:
            if not isinstance(value, ast.Tuple | ast.List) or path[0] < 0:
                return query(None)
            if any(isinstance(e, ast.Starred) for e in value.elts) or path[0] >= len(value.elts):
                return query(None)
            value, path = value.elts[path[0]], path[1:]
        return query(value)

    def _param_query(self, binding: Binding, query: Callable, combine: Callable) -> Any:
        func = binding.node
        if not isinstance(func, FunctionNode) or func is self.m.orchestrate:
            return query(None)
        calls = self.m.calls_to(func)
        if id(func) in self.m.escaped_functions or not calls:
            return query(None)
        return combine([query(_argument(func, call, binding.index)) for call in calls])

    # ---- intervals ---------------------------------------------------------------------

    def interval(self, node: ast.AST | None) -> Interval:
        if node is None:
            return UNKNOWN
        if isinstance(node, ast.Constant):  # a leaf: nothing to guard
            value = node.value
            return (int(value), int(value)) if isinstance(value, int) else UNKNOWN
        key = ("int", id(node))
        if key in self._memo:
            return self._memo[key]  # type: ignore[no-any-return]
        return self._guard(key, lambda: self._interval(node), UNKNOWN)

    def _interval(self, node: ast.AST) -> Interval:
        if isinstance(node, ast.Constant):
            value = node.value
            return (int(value), int(value)) if isinstance(value, int) else UNKNOWN
        handler = _INTERVAL_HANDLERS.get(type(node))
        return handler(self, node) if handler is not None else UNKNOWN

    def _name_interval(self, node: ast.Name) -> Interval:
        owner, bindings = self.m.bindings_of(node.id, node)
        if owner is None:
            return UNKNOWN
        if owner is self.m.module:
            value = self.m.env.get(node.id)
            return (int(value), int(value)) if isinstance(value, int) else UNKNOWN
        key = ("name-int", id(owner), node.id)
        return self._guard(key, lambda: union([self._binding_interval(b) for b in bindings]),
                           UNKNOWN)

    def _binding_interval(self, binding: Binding) -> Interval:
        if binding.kind == "param":
            return self._param_query(binding, self.interval, union)
        if binding.kind == "assign":
            return self._path(binding.value, binding.path, self.interval)
        if binding.kind in ("for", "comp") and isinstance(binding.value, ast.Call):
            return self._loop_var_interval(binding.value, binding.path)
        return UNKNOWN

    def _loop_var_interval(self, call: ast.Call, path: tuple[int, ...]) -> Interval:
        if self.m.is_builtin_ref(call.func, "range") and path == () and not call.keywords:
            args = call.args
            step = 1 if len(args) < 3 else fold_quiet(args[2], self.m.env)
            if len(args) == 1:
                return 0, dec(self.interval(args[0])[1])
            if len(args) in (2, 3) and is_int(step) and step > 0:
                return self.interval(args[0])[0], dec(self.interval(args[1])[1])
        if self.m.is_builtin_ref(call.func, "enumerate") and path == (0,) and call.args:
            start = (0, 0) if len(call.args) < 2 else self.interval(call.args[1])
            count = self.length(call.args[0])
            hi = None if count is None or start[1] is None else start[1] + count - 1
            return start[0], hi
        return UNKNOWN

    def _call_interval(self, node: ast.Call) -> Interval:
        if any(isinstance(a, ast.Starred) for a in node.args) or node.keywords:
            return UNKNOWN
        parts = [self.interval(a) for a in node.args]
        if self.m.is_builtin_ref(node.func, "len") and len(node.args) == 1:
            return 0, self.length(node.args[0])
        if self.m.is_builtin_ref(node.func, "min") and len(parts) > 1:
            his = [p[1] for p in parts if p[1] is not None]
            return union(parts)[0], (min(his) if his else None)
        if self.m.is_builtin_ref(node.func, "max") and len(parts) > 1:
            los = [p[0] for p in parts if p[0] is not None]
            return (max(los) if los else None), union(parts)[1]
        if self.m.is_builtin_ref(node.func, "int") and len(parts) == 1:
            return parts[0]
        return UNKNOWN

    def _binop_interval(self, node: ast.BinOp) -> Interval:
        (a, b), (c, d) = self.interval(node.left), self.interval(node.right)
        if a is not None and a == b and c is not None and c == d:
            exact = fold_quiet(ast.BinOp(ast.Constant(a), node.op, ast.Constant(c)))
            if is_int(exact):
                return exact, exact
        if isinstance(node.op, ast.Add):
            return add(a, c), add(b, d)
        if isinstance(node.op, ast.Sub):
            return add(a, neg(d)), add(b, neg(c))
        if isinstance(node.op, ast.Mult) and None not in (a, b, c, d):
            products = [x * y for x in (a, b) for y in (c, d)]  # type: ignore[operator]
            return min(products), max(products)
        if isinstance(node.op, ast.FloorDiv) and c is not None and c == d and c > 0:
            return (None if a is None else a // c), (None if b is None else b // c)
        if isinstance(node.op, ast.Mod) and c is not None and c == d and c > 0:
            return 0, c - 1
        return UNKNOWN

    def _unary_interval(self, node: ast.UnaryOp) -> Interval:
        lo, hi = self.interval(node.operand)
        if isinstance(node.op, ast.USub):
            return neg(hi), neg(lo)
        if isinstance(node.op, ast.UAdd):
            return lo, hi
        return UNKNOWN

    def _ifexp_interval(self, node: ast.IfExp) -> Interval:
        return union([self.interval(node.body), self.interval(node.orelse)])


def _argument(func: FunctionNode, call: ast.Call, index: int) -> ast.AST | None:
    """The expression a call passes for parameter ``index`` (or its default)."""
    params = all_params(func)
    if index >= len(params) or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    name = params[index].arg
    positional = [*func.args.posonlyargs, *func.args.args]
    if index < len(positional) and index < len(call.args):
        return call.args[index]
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    defaults = func.args.defaults
    offset = len(positional) - len(defaults)
    if offset <= index < len(positional):
        return defaults[index - offset]
    return None


_LENGTH_HANDLERS: dict[type[ast.AST], Callable[[Bounds, Any], int | None]] = {
    ast.Await: Bounds._await_length, ast.BinOp: Bounds._binop_length,
    ast.IfExp: Bounds._choice_length, ast.BoolOp: Bounds._choice_length,
    ast.Subscript: Bounds._subscript_length, ast.Call: Bounds._call_length,
    ast.Name: Bounds._name_length,
}
_INTERVAL_HANDLERS: dict[type[ast.AST], Callable[[Bounds, Any], Interval]] = {
    ast.Name: Bounds._name_interval, ast.Call: Bounds._call_interval,
    ast.BinOp: Bounds._binop_interval, ast.UnaryOp: Bounds._unary_interval,
    ast.IfExp: Bounds._ifexp_interval,
}

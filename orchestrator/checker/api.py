"""R02 (ctx API surface), R08 (capability names) and the ctx.run argument shape of R10."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .analysis import Analysis, nfkc, snippet
from .builtins import (
    CTX_METHODS,
    CTX_USAGE,
    FANOUT_METHODS,
    MAX_TAKE,
    OLD_API_HINTS,
    RUN_KEYWORDS,
)
from .model import Violation
from .numeric import Numeric
from .scope import COMPREHENSIONS, positional_params

_METHODS = ", ".join(f"ctx.{m}" for m in CTX_METHODS)


def _r02(node: ast.AST, message: str, hint: str) -> Violation:
    return Analysis.violation("R02", node, message, hint)


# ---- how ctx itself is used ----------------------------------------------------------------

def check_ctx_uses(an: Analysis) -> Iterator[Violation]:
    for node in an.model.ctx_name_nodes:
        if isinstance(node.ctx, ast.Load):
            found = _ctx_load(an, node)
            if found is not None:
                yield found
        else:
            yield _r02(node, f"the context parameter {node.id} is reassigned",
                       f"never assign to {node.id}; use another name for your data")


def _ctx_load(an: Analysis, node: ast.Name) -> Violation | None:
    parent = an.parent(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return _ctx_attribute(an, parent)
    call: ast.AST | None
    position: str | int | None
    if isinstance(parent, ast.keyword):
        call, position = an.parent(parent), parent.arg
    elif isinstance(parent, ast.Call) and node in parent.args:
        call, position = parent, parent.args.index(node)
    else:
        call, position = None, None
    func = an.model.function_def(call.func) if isinstance(call, ast.Call) else None
    if func is None:
        return _r02(node, f"{node.id} is used as a value ({snippet(parent or node)})",
                    f"call ctx methods directly ({_METHODS}), or pass {node.id} whole as an "
                    "argument of a helper you defined: await helper(ctx, x)")
    names = [p.arg for p in positional_params(func)]
    ok = (position in names) if isinstance(position, str) else (
        position is not None and position < len(names))
    if ok:
        return None
    return _r02(node, f"{node.id} is passed to {func.name} without a matching parameter",
                f"give {func.name} a named parameter for the context, e.g. "
                f"async def {func.name}(ctx, ...)")


def _ctx_attribute(an: Analysis, attr: ast.Attribute) -> Violation | None:
    if attr.attr.startswith("_"):
        return None  # R06 / R10 name private and reserved attributes
    call = an.parent(attr)
    if attr.attr not in CTX_METHODS:
        new = OLD_API_HINTS.get(attr.attr)
        hint = (f"ctx.{attr.attr} does not exist; use {CTX_USAGE[new]}" if new else
                f"the context has only {_METHODS}")
        return _r02(attr, f"unknown context method ctx.{attr.attr}", hint)
    if isinstance(call, ast.Call) and call.func is attr:
        return None
    return _r02(attr, f"ctx.{attr.attr} is used without being called (aliasing)",
                f"call it directly where you need it: {CTX_USAGE[attr.attr]}")


# ---- how each ctx method is called ---------------------------------------------------------

def check_ctx_calls(an: Analysis) -> Iterator[Violation]:
    fanout_vars = _fanout_variables(an)
    for call, method in an.ctx_calls():
        for found in (_arity(call, method), _awaited(an, call, method, fanout_vars)):
            if found is not None:
                yield found


def _arity(call: ast.Call, method: str) -> Violation | None:
    if method == "run":
        return None  # R10 checks the shape of ctx.run
    arity = CTX_METHODS[method][0]
    starred = any(isinstance(a, ast.Starred) for a in call.args)
    if not starred and not call.keywords and len(call.args) == arity:
        return None
    return _r02(call, f"ctx.{method} takes exactly {arity} positional argument"
                f"{'s' if arity > 1 else ''}, without *args or keywords",
                f"call it as {CTX_USAGE[method]}")


def _fanout_variables(an: Analysis) -> set[tuple[int, str]]:
    """(scope, name) of local lists handed to ctx.parallel / ctx.race."""
    found: set[tuple[int, str]] = set()
    for call, _ in an.ctx_calls(*FANOUT_METHODS):
        if call.args and isinstance(call.args[0], ast.Name):
            owner = an.model.owner_of(call.args[0])
            if owner is not None:
                found.add((id(owner), call.args[0].id))
    return found


def _awaited(an: Analysis, call: ast.Call, method: str,
             fanout_vars: set[tuple[int, str]]) -> Violation | None:
    awaited = isinstance(an.parent(call), ast.Await)
    if method == "log":
        if not awaited:
            return None
        return _r02(call, "ctx.log is synchronous and must not be awaited",
                    'call it as a statement: ctx.log("message")')
    if awaited or _collected_for_fanout(an, call, fanout_vars):
        return None
    return _r02(call, f"ctx.{method}(...) is not awaited",
                f"write await ctx.{method}(...), or put the call directly in the list given "
                "to await ctx.parallel([...]) / ctx.race([...])")


def _collected_for_fanout(an: Analysis, call: ast.AST,
                          fanout_vars: set[tuple[int, str]]) -> bool:
    """An unawaited ctx call is fine as an element of a list that a fanout awaits."""
    holder = an.parent(call)
    if isinstance(holder, COMPREHENSIONS) and getattr(holder, "elt", None) is call:
        pass
    elif not isinstance(holder, ast.List | ast.Tuple):
        return _appended_to_fanout_var(an, call, holder, fanout_vars)
    user = an.parent(holder)
    if an.ctx_method(user) in FANOUT_METHODS and isinstance(user, ast.Call):
        return bool(user.args) and user.args[0] is holder
    if isinstance(user, ast.Assign) and user.value is holder and len(user.targets) == 1:
        target = user.targets[0]
        return isinstance(target, ast.Name) and _is_fanout_var(an, target, fanout_vars)
    return False


def _appended_to_fanout_var(an: Analysis, call: ast.AST, holder: ast.AST | None,
                            fanout_vars: set[tuple[int, str]]) -> bool:
    if not (isinstance(holder, ast.Call) and isinstance(holder.func, ast.Attribute)
            and holder.func.attr == "append" and holder.args == [call]):
        return False
    receiver = holder.func.value
    return isinstance(receiver, ast.Name) and _is_fanout_var(an, receiver, fanout_vars)


def _is_fanout_var(an: Analysis, name: ast.Name, fanout_vars: set[tuple[int, str]]) -> bool:
    owner = an.model.owner_of(name)
    return owner is not None and (id(owner), name.id) in fanout_vars


# ---- ctx.run: capability name (R08) and argument shape (R10) -------------------------------

def _catalog(capabilities: frozenset[str]) -> str:
    return ", ".join(sorted(capabilities)) or "(no capabilities are granted)"


def check_capabilities(an: Analysis) -> Iterator[Violation]:
    for call, _ in an.ctx_calls("run"):
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Constant) and isinstance(first.value, str)):
            yield Analysis.violation(
                "R08", call, "the capability name of ctx.run must be a string literal",
                f'write the name inline, e.g. ctx.run("image.generate", {{...}}); '
                f"capabilities: {_catalog(an.capabilities)}")
            continue
        name = first.value
        if name in an.capabilities:
            continue
        lookalike = nfkc(name) in an.capabilities
        message = (f"capability {name!r} uses look-alike characters" if lookalike else
                   f"unknown capability {name!r}")
        yield Analysis.violation("R08", call, message,
                                 "use one of the catalog names exactly: "
                                 f"{_catalog(an.capabilities)}")


def check_run_arguments(an: Analysis) -> Iterator[Violation]:
    usage = CTX_USAGE["run"]
    numeric = Numeric(an.model)
    for call, _ in an.ctx_calls("run"):
        seen: set[str] = set()
        for kw in call.keywords:
            yield from _run_keyword(kw, seen, usage, numeric)
        if any(isinstance(a, ast.Starred) for a in call.args):
            yield Analysis.violation("R10", call, "*args in ctx.run hides the capability",
                                     f"write both arguments out: {usage}")
        elif len(call.args) != 2:
            yield Analysis.violation("R10", call,
                                     f"ctx.run takes exactly two positional arguments, "
                                     f"got {len(call.args)}",
                                     f"call it as {usage}")


_TAKE_HINT = (f"write take=N with a number N from 1 to {MAX_TAKE}, e.g. "
              'await ctx.run("image.generate", {...}, take=2) or take=i + 1 in a loop over '
              "range(...), or leave it out")


def _run_keyword(kw: ast.keyword, seen: set[str], usage: str, numeric: Numeric
                 ) -> Iterator[Violation]:
    """``take=N`` once, N an int literal 1..MAX_TAKE or a provably numeric expression
    (the runtime checks its range); ``_site`` is reported by names.py."""
    if kw.arg is None:
        yield Analysis.violation("R10", kw.value, "**kwargs in ctx.run is not allowed",
                                 f"pass the payload dict positionally: {usage}")
        return
    name = nfkc(kw.arg)
    if name == "_site":
        return  # names.check_identifiers reports the reserved keyword
    if name not in RUN_KEYWORDS:
        yield Analysis.violation("R10", kw.value,
                                 f"ctx.run takes no keyword argument {kw.arg}=",
                                 f"put every field in the payload dict: {usage}; the only "
                                 "keyword is take=N")
        return
    if name in seen:
        yield Analysis.violation("R10", kw.value, f"ctx.run takes {name}= only once",
                                 _TAKE_HINT)
        return
    seen.add(name)
    if isinstance(kw.value, ast.Constant):
        value = kw.value.value
        if not (type(value) is int and 1 <= value <= MAX_TAKE):
            yield Analysis.violation("R10", kw.value,
                                     f"take= must be an integer from 1 to {MAX_TAKE}, "
                                     f"not {snippet(kw.value, 30)}", _TAKE_HINT)
    elif not numeric.expr(kw.value):
        yield Analysis.violation("R10", kw.value,
                                 f"take= must be a number, and {snippet(kw.value, 30)} is not "
                                 "provably one", _TAKE_HINT)

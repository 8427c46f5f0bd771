"""Structural callsites and call-expression fingerprints (pure).

A *local site* names one call expression inside one function: ``f/b1/.../#j``
with ``f`` the function's qualified name, each ``b`` the kind and ordinal of a
statement block, ``j`` the ordinal of the call among the calls made directly in
the innermost block. Two kinds of call count: capability calls (``ctx.run``,
``ctx.race``) and calls of the script's own async helpers that reach one.

A *site* σ is the chain of local sites from ``orchestrate`` down to a capability
call, joined by ``>``: ``orchestrate/#1>orchestrate.gen/#0`` is the ``ctx.run``
of helper ``gen`` reached through the helper call ``#1`` of ``orchestrate``. A
helper called from two places therefore has two sites, and a call inserted in
front of a helper call no longer shifts the occurrences of the helper's calls.

Only blocks that contain a counted call are numbered and only counted calls
advance ``j``, so comments, formatting, payload values and call-free statements
inserted before a site leave σ unchanged, while wrapping a call in a new block
or moving it into a helper changes it (the gate's remap then relocates it).

A function defined inside a block is named after the block
(``orchestrate/if0.gen``), so two same-named definitions get distinct sites. The
functions and their local sites are ``orchestrator.site_program``; this module chains
them into sites, each with how often and at which fanout paths the script can reach it.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeGuard

from broker.errors import AnnotationError
from broker.identity import sha256_hex
from broker.prefix import RACE
from orchestrator.site_paths import TOP, Link, Shape, Shapes, from_json, frozen, join, merge
from orchestrator.site_program import Function, LocalCall, LocalSites, Program
from sandbox.language import LIMITS

SITE_KEYWORD = "_site"
AT_FUNCTION = "__at__"  # the host's call-site tag around a helper call
FN_FUNCTION = "__fn__"  # ... and around a helper handed over as a value
ENTRY = "orchestrate"
MAX_SITES = 10_000


@dataclass(frozen=True)
class Site:
    """One capability call as reached from the entry point."""

    site: str  # the chain of local sites, joined by ">"
    capability: str  # the capability name, or "ctx.race" for a race decision
    fingerprint: str  # the capability call's own expression
    chain_fingerprint: str  # ... and the arguments of every helper call on the way
    line: int  # of the capability call
    col: int  # UTF-8 byte offset, as the ast module reports it
    end_line: int
    end_col: int
    entry_line: int  # of the first call on the chain (the helper call in the caller)
    # The call's ``take=N`` when it is a literal (1 without one); None when it is computed
    # (``take=i + 1`` in a bounded loop): then the frame's take is only range-checked.
    take: int | None = 1
    # How many calls the script can make here in one revision (the product of the
    # static loop bounds along the chain); None when that has no static bound.
    max_calls: int | None = None
    # ... and how many of them at one fanout path: what one branch of the innermost
    # fanout makes each time that fanout runs (the comprehension that builds a fanout's
    # items makes branches, not calls in one); None when that has no static bound.
    branch_calls: int | None = None
    # The fanout paths the script can make them at (orchestrator.site_paths); None when
    # they have no static shape.
    paths: tuple[Shape, ...] | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Site:
        """A site as ``dataclasses.asdict`` and JSON left it."""
        return cls(**{**data, "paths": from_json(data.get("paths"))})


def is_at_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == AT_FUNCTION and len(node.args) == 2 and not node.keywords
            and isinstance(node.args[1], ast.Call))


def is_fn_call(node: ast.AST) -> TypeGuard[ast.Call]:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == FN_FUNCTION and len(node.args) == 1 and not node.keywords
            and isinstance(node.args[0], ast.Name))


def capability_of(call: ast.Call) -> str:
    if isinstance(call.func, ast.Attribute) and call.func.attr == "race":
        return RACE
    if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return "<dynamic>"


def _dump(node: ast.AST) -> str:
    """The node's normalized text, without host annotations at any depth."""
    if any(isinstance(n, ast.keyword) and n.arg == SITE_KEYWORD for n in ast.walk(node)):
        node = copy.deepcopy(node)
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                sub.keywords = [kw for kw in sub.keywords if kw.arg != SITE_KEYWORD]
    return ast.dump(node, include_attributes=False)


def fingerprint(call: ast.Call) -> str:
    """Hash of the call's normalized expression; host annotations excluded.

    ``ast.dump`` without attributes ignores positions, comments and formatting;
    any literal or expression edit inside the call changes it.
    """
    parts = [_dump(arg) for arg in call.args]
    parts += [f"{kw.arg}={_dump(kw.value)}" for kw in call.keywords if kw.arg != SITE_KEYWORD]
    return sha256_hex(_dump(call.func) + "(" + ",".join(parts) + ")")


def arguments_fingerprint(call: ast.Call) -> str:
    """A helper call's arguments only: renaming the helper keeps it."""
    parts = [_dump(arg) for arg in call.args] + [f"{kw.arg}={_dump(kw.value)}"
                                                  for kw in call.keywords]
    return sha256_hex("(" + ",".join(parts) + ")")


def unwrap_at(tree: ast.AST) -> dict[int, str]:
    """Replace each ``__at__("site", helper(...))`` by the helper call and each
    ``__fn__(helper)`` by the name, in place.

    Returns the tag of every unwrapped node (by node id; "" for a ``__fn__`` name),
    so the annotation can be verified after a re-parse.
    """
    tags: dict[int, str] = {}
    for node in ast.walk(tree):
        for name, value in ast.iter_fields(node):
            if isinstance(value, list):
                for index, item in enumerate(value):
                    if is_at_call(item) or is_fn_call(item):
                        value[index] = _take_tag(item, tags)
            elif is_at_call(value) or is_fn_call(value):
                setattr(node, name, _take_tag(value, tags))
    return tags


def _take_tag(wrapper: ast.Call, tags: dict[int, str]) -> ast.expr:
    if is_fn_call(wrapper):
        tags[id(wrapper.args[0])] = ""
        return wrapper.args[0]
    inner = wrapper.args[1]
    assert isinstance(inner, ast.Call)
    tag = wrapper.args[0]
    tags[id(inner)] = tag.value if isinstance(tag, ast.Constant) and isinstance(
        tag.value, str) else ""
    return inner


# ---- chains ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SiteTable:
    """Every site reachable from the entry point, every counted call's local site, and
    every name that hands an effectful helper over as a value."""

    sites: tuple[Site, ...]
    local: dict[int, LocalCall]  # by id() of the call node in the parsed tree
    handed: frozenset[int] = frozenset()  # id() of those names

    def by_site(self) -> dict[str, Site]:
        return {s.site: s for s in self.sites}


class StaticBounds(Protocol):
    """What the checker's analyses know about each call (``orchestrator.checker.reach``)."""

    def executions(self, node: ast.AST) -> int | None:
        """How many times ``node`` can run per run of its function (None: unbounded)."""
        ...

    def nesting(self, node: ast.AST) -> Link:
        """The fanouts of its own function the awaitable ``node`` runs inside."""
        ...

    def handed(self, name: ast.Name) -> Link:
        """The same for a helper handed over as a value (a stage or a dag node)."""
        ...

    def handed_runs(self, name: ast.Name) -> int | None:
        """How many times such a helper can run per run of the function handing it."""
        ...

    def branch_executions(self, node: ast.AST) -> int | None:
        """How many of ``executions(node)`` can be at one path of its function's fanouts."""
        ...

    def handed_branch_runs(self, name: ast.Name) -> int | None:
        """How many of ``handed_runs(name)`` can be at one fanout path."""
        ...


class _Unbounded:
    def executions(self, node: ast.AST) -> int | None:
        return None

    def nesting(self, node: ast.AST) -> Link:
        return None

    def handed(self, name: ast.Name) -> Link:
        return None

    def handed_runs(self, name: ast.Name) -> int | None:
        return None

    def branch_executions(self, node: ast.AST) -> int | None:
        return None

    def handed_branch_runs(self, name: ast.Name) -> int | None:
        return None


def site_table(tree: ast.Module, bounds: StaticBounds | None = None) -> SiteTable:
    """Sites of a parsed script (``__at__`` tags, if any, are unwrapped first).
    ``bounds`` says how often each call can run and inside which fanouts (the checker's
    analyses, ``orchestrator.checker.reach``); without it no site is bounded."""
    unwrap_at(tree)
    program = Program(tree)
    local = LocalSites(program)
    sites: dict[str, Site] = {}
    walk = _Chains(program, local, bounds or _Unbounded(), sites)
    for root in [f for f in program.functions if f.qualname == ENTRY]:
        walk.function(root, _Way((), (), None, 1, 1, TOP), [])
    return SiteTable(tuple(sites.values()), local.calls, _handed(program, local))


def _handed(program: Program, local: LocalSites) -> frozenset[int]:
    """Names of effectful helpers used as values (not called): the runtime must know the
    chain they were handed over on, so the annotator tags them too."""
    called = {id(c.node.func) for c in local.calls.values()}
    return frozenset(id(name) for function in program.functions
                     for name, targets in program.references(function)
                     if id(name) not in called
                     and any(program.is_effectful(t) for t in targets))


@dataclass(frozen=True)
class _Way:
    """How the walk reached a function: the chain of call sites into it, their argument
    fingerprints, the line of its first call, how often it can run in all and at one
    fanout path (None: unbounded) and the fanout paths it runs at (None: no static
    shape)."""

    chain: tuple[str, ...]
    chain_fps: tuple[str, ...]
    entry_line: int | None
    bound: int | None
    per_path: int | None
    paths: Shapes | None


class _Chains:
    """The walk from ``orchestrate`` down every helper call to the capability calls."""

    def __init__(self, program: Program, local: LocalSites, bounds: StaticBounds,
                 out: dict[str, Site]) -> None:
        self.program, self.local, self.bounds, self.out = program, local, bounds, out

    def function(self, function: Function, way: _Way, stack: list[int]) -> None:
        if id(function.node) in stack:
            return  # recursion: the checker refuses it; never loop here
        stack.append(id(function.node))
        calls = self.local.by_function.get(id(function.node), [])
        for call in calls:
            here = self._step(way, call.node, self.bounds.nesting(call.node),
                              self.bounds.executions(call.node),
                              self.bounds.branch_executions(call.node))
            if not call.helpers:
                self._add(call, here)
                continue
            for helper in call.helpers:
                self.function(helper, replace(
                    here, chain=(*way.chain, call.local),
                    chain_fps=(*way.chain_fps, arguments_fingerprint(call.node))), stack)
        # Helpers handed over as values (ctx.pipeline stages, ctx.dag nodes) run on this
        # chain, once per stage or node each time the fanout that takes them runs.
        counted = {id(c.node.func) for c in calls}
        for name, targets in self.program.references(function):
            if id(name) in counted:
                continue
            for target in targets:
                if self.program.is_effectful(target):
                    handed = self._step(way, name, self.bounds.handed(name),
                                        self.bounds.handed_runs(name),
                                        self.bounds.handed_branch_runs(name))
                    self.function(target, replace(handed, entry_line=way.entry_line), stack)
        stack.pop()

    def _step(self, way: _Way, node: ast.AST, link: Link, runs: int | None,
              branch_runs: int | None) -> _Way:
        """The way one call (or handed name) in the function reached by ``way`` goes on."""
        def race_site(race: ast.Call) -> str | None:
            counted = self.local.calls.get(id(race))
            return None if counted is None else ">".join((*way.chain, counted.local))

        line = way.entry_line if way.entry_line is not None else getattr(node, "lineno", 0)
        return replace(way, entry_line=line, bound=_times(way.bound, runs),
                       per_path=_times(way.per_path, branch_runs),
                       paths=join(way.paths, link, race_site))

    def _add(self, call: LocalCall, way: _Way) -> None:
        node = call.node
        own = fingerprint(node)
        name = ">".join((*way.chain, call.local))
        if len(name) > LIMITS["site_chars"]:
            raise AnnotationError(f"line {node.lineno}: the call is reached through a chain "
                                  f"of helper calls longer than {LIMITS['site_chars']} "
                                  "characters (site_chars); call it from fewer nested helpers",
                                  line=node.lineno)
        bound, per_path, paths = way.bound, way.per_path, way.paths
        seen = self.out.get(name)
        if seen is not None:  # reached on two ways: both count
            bound = _plus(bound, seen.max_calls)
            per_path = _plus(per_path, seen.branch_calls)
            paths = merge(paths, None if seen.paths is None else frozenset(seen.paths))
        self.out[name] = Site(
            site=name, capability=capability_of(node), fingerprint=own,
            chain_fingerprint=sha256_hex("|".join((*way.chain_fps, own))),
            line=node.lineno, col=node.col_offset, end_line=node.end_lineno or node.lineno,
            end_col=node.end_col_offset or 0, entry_line=way.entry_line or node.lineno,
            take=_literal_take(node), max_calls=bound, branch_calls=per_path,
            paths=frozen(paths))
        if len(self.out) > MAX_SITES:
            raise AnnotationError(f"the script reaches more than {MAX_SITES} call sites "
                                  "through its helpers; call fewer helpers from fewer places")


def _times(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a * b


def _plus(a: int | None, b: int | None) -> int | None:
    return None if a is None or b is None else a + b


def _literal_take(node: ast.Call) -> int | None:
    for keyword in node.keywords:
        if keyword.arg == "take":
            value = keyword.value
            if isinstance(value, ast.Constant) and type(value.value) is int:
                return value.value
            return None
    return 1


def assign_sites(tree: ast.Module) -> list[Site]:
    """Every site reachable from ``orchestrate``."""
    return list(site_table(tree).sites)


def count_capability_calls(sites: list[Site] | tuple[Site, ...]) -> int:
    """Capability call *expressions* in the source (a helper's call counts once)."""
    return len({(s.site.rsplit(">", 1)[-1], s.fingerprint) for s in sites
                if s.capability != RACE})

"""The checker entry point: R00 limits first, then a table of rule handlers.

``check`` never executes the script, never raises, and returns the same report for the
same input. Anything unexpected inside the checker becomes an R00 violation, so a script
the checker cannot analyse is rejected (fail closed), never accepted.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from typing import Any

from broker.catalog import CAPABILITY_NAMES
from broker.errors import InputError
from orchestrator.source import decode_source

from . import (
    api,
    attributes,
    excepts,
    fanout,
    forms,
    limits,
    loops,
    names,
    recursion,
    shape,
    sizes,
    state,
)
from .analysis import Analysis
from .model import CheckReport, Violation, empty_facts
from .scope import ScriptModel
from .walk import TreeTooLarge

Rule = Callable[[Analysis], Iterable[Violation]]

# One handler per concern; several rule ids can share a module, none shares a handler.
RULES: tuple[tuple[str, Rule], ...] = (
    ("R01", shape.check_shape),
    ("R02", api.check_ctx_uses),
    ("R02", api.check_ctx_calls),
    ("R03", loops.check_loops),
    ("R04", loops.check_determinism),
    ("R05", fanout.check_fanout),
    ("R06", names.check_identifiers),
    ("R06", attributes.check_attributes),
    ("R06", attributes.check_percent_format),
    ("R10", names.check_reserved_strings),
    ("R07", names.check_free_names),
    ("R08", api.check_capabilities),
    ("R09", excepts.check_excepts),
    ("R10", api.check_run_arguments),
    ("R11", shape.check_constructs),
    ("R11", shape.check_finally_exits),
    ("R11", state.check_module_state),
    ("R12", recursion.check_recursion),
    ("R00", sizes.check_sizes),
    ("R04", forms.check_text_forms),
    ("R11", forms.check_annotations),
)


def check(source: str, *, capabilities: frozenset[str] = CAPABILITY_NAMES) -> CheckReport:
    """Check a script statically against R00-R12; never executes it, never raises."""
    try:
        return _check(source, frozenset(capabilities))
    except Exception as exc:  # fail closed: a script the checker cannot analyse is invalid
        return CheckReport.from_violations([Violation(
            "R00", 1, f"the checker could not analyse this script ({type(exc).__name__})",
            "simplify the script: shorter functions, flatter expressions, plain literals")])


def _check(source: Any, capabilities: frozenset[str]) -> CheckReport:
    if not isinstance(source, str | bytes):
        return _reject(Violation("R00", 1, f"the script must be text, not "
                                 f"{type(source).__name__}", "pass the script source as str"))
    try:
        text = decode_source(source).text
    except (InputError, UnicodeError) as exc:
        return _reject(Violation("R00", 1, str(exc), "save the script as plain UTF-8 text "
                                 "under the size limit"))
    early = limits.check_size(text) or limits.prescan(text)
    if early is not None:
        return _reject(early)
    tree, failure = limits.parse(text)
    if tree is None or failure is not None:
        return _reject(failure or Violation("R00", 1, "the script did not parse", "fix it"))
    return _analyse(tree, capabilities)


def _analyse(tree: ast.Module, capabilities: frozenset[str]) -> CheckReport:
    try:
        model = ScriptModel(tree)  # the one walk; stops at the R00 tree limits
    except TreeTooLarge as exc:
        return _reject(limits.tree_too_large(exc))
    an = Analysis(tree=tree, model=model, capabilities=capabilities)
    found: list[Violation] = limits.huge_literals(model)
    for _, rule in RULES:
        found.extend(rule(an))
    return CheckReport.from_violations(found, _facts(an))


def _facts(an: Analysis) -> dict[str, Any]:
    runs = [call for call, _ in an.ctx_calls("run")]
    names = {call.args[0].value for call in runs if call.args
             and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str)}
    return {"capability_calls": len(runs), "capabilities": sorted(names),
            "functions": sorted({f.name for f in an.model.functions})}


def _reject(violation: Violation) -> CheckReport:
    return CheckReport.from_violations([violation], empty_facts())

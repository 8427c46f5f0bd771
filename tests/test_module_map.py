"""The README's module map names exactly the modules of the four packages, and every import
of every module (module level, inside functions, under TYPE_CHECKING) goes down the layers
(workers → orchestrator → sandbox → broker) or stays in its own, and never in a circle."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("broker", "sandbox", "orchestrator", "workers")  # lowest first
ABOVE = ("bench", "tests")  # never imported by the product
ENTRY = re.compile(r"^ {4}((?:broker|sandbox|orchestrator|workers)/[\w/]*?(?:\.py|/))\s{2,}\S")


def _modules() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for layer in LAYERS
            for p in (ROOT / layer).rglob("*.py")
            if p.name != "__init__.py" and "__pycache__" not in p.parts}


def _map() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("### Module map", 1)[1].split("\n## ", 1)[0]
    return [m.group(1) for line in section.splitlines() if (m := ENTRY.match(line))]


def _covered(module: str, entries: list[str]) -> bool:
    return module in entries or any(e.endswith("/") and module.startswith(e) for e in entries)


def test_every_module_is_in_the_map_and_every_entry_exists() -> None:
    entries = _map()
    assert len(entries) == len(set(entries)), "an entry is listed twice"
    modules = _modules()
    missing = sorted(m for m in modules if not _covered(m, entries))
    stale = sorted(e for e in entries
                   if not (any(m.startswith(e) for m in modules) if e.endswith("/")
                           else e in modules))
    assert not missing, f"modules missing from the README's module map: {missing}"
    assert not stale, f"module map entries with no module: {stale}"


# ---- the import graph ---------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    source: str  # dotted module that imports
    target: str  # dotted module (or package, for its __init__) it imports
    line: int

    def files(self) -> str:
        return f"{_file(self.source)}:{self.line} imports {_file(self.target)}"


@cache
def _product() -> dict[str, Path]:
    """Every module of the four packages by dotted name, packages (their __init__) too."""
    found: dict[str, Path] = {}
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _file(module: str) -> str:
    path = _product().get(module)
    return path.relative_to(ROOT).as_posix() if path else module


def _resolve(name: str) -> str:
    """The product module ``name`` loads (the longest known prefix), else ``name``."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in _product():
            return ".".join(parts)
        parts.pop()
    return name


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - node.level + 1]
        origin = ".".join([*base, *([node.module] if node.module else [])])
    else:
        origin = node.module or ""
    # `from pkg import mod` loads the submodule; `from mod import name` loads the module.
    submodules = [f"{origin}.{a.name}" for a in node.names if f"{origin}.{a.name}" in _product()]
    return submodules or [origin]


def imports_of(module: str, path: Path) -> list[Import]:
    """Every import statement anywhere in the module: in function bodies too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for name in _targets(node, module, path.name == "__init__.py"):
                target = _resolve(name)
                if target != module:
                    found.append(Import(module, target, node.lineno))
    return found


@cache
def _graph() -> tuple[Import, ...]:
    return tuple(i for module, path in sorted(_product().items())
                 for i in imports_of(module, path))


def _layer(module: str) -> int | None:
    top = module.split(".", 1)[0]
    if top in LAYERS:
        return LAYERS.index(top)
    return len(LAYERS) if top in ABOVE else None


def upward(imports: tuple[Import, ...] | list[Import]) -> list[str]:
    found = []
    for i in imports:
        here, there = _layer(i.source), _layer(i.target)
        if here is not None and there is not None and there > here:
            found.append(i.files())
    return found


def circles(imports: tuple[Import, ...] | list[Import]) -> list[list[Import]]:
    """One shortest circle per strongly connected group of modules (Tarjan, iterative)."""
    edges: dict[str, dict[str, Import]] = {}
    for i in imports:
        edges.setdefault(i.source, {}).setdefault(i.target, i)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, {}))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(edges.get(child, {})))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return [_shortest_circle(min(group), group, edges) for group in groups]


def _shortest_circle(start: str, group: set[str], edges: dict[str, dict[str, Import]]
                     ) -> list[Import]:
    paths: dict[str, list[Import]] = {start: []}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target, edge in sorted(edges.get(node, {}).items()):
            if target == start:
                return [*paths[node], edge]
            if target in group and target not in paths:
                paths[target] = [*paths[node], edge]
                queue.append(target)
    raise AssertionError(f"{start} is in a group without a circle")


def test_no_import_goes_up_a_layer() -> None:
    found = upward(_graph())
    assert not found, "imports that go up the layers (move the concept down, or the " \
        "composition up):\n" + "\n".join(found)


def test_no_modules_import_each_other_in_a_circle() -> None:
    found = [" → ".join(i.files() for i in circle) for circle in circles(_graph())]
    assert not found, "import circles:\n" + "\n".join(found)


def test_the_reader_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    """The checks are not vacuous: the imports a module-level reading would miss are read,
    and staged upward imports and circles are reported with both files."""
    sample = ("from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from workers.client import Client\n"
              "def f():\n    from orchestrator import embedded\n"
              "    from . import identity\n")
    read = [Import("broker.settings", _resolve(n), 0) for node in ast.walk(ast.parse(sample))
            if isinstance(node, ast.Import | ast.ImportFrom)
            for n in _targets(node, "broker.settings", False)]
    assert {i.target for i in read} >= {"workers.client", "orchestrator.embedded",
                                        "broker.identity"}
    assert upward(read) == ["broker/settings.py:0 imports workers/client.py",
                            "broker/settings.py:0 imports orchestrator/embedded.py"]
    staged = [Import("sandbox.runner", "sandbox.warm_pool", 3),
              Import("sandbox.warm_pool", "sandbox.runner", 7),
              Import("sandbox.job", "tests.acceptance", 9)]
    assert [[i.files() for i in c] for c in circles(staged)] == [[
        "sandbox/runner.py:3 imports sandbox/warm_pool.py",
        "sandbox/warm_pool.py:7 imports sandbox/runner.py"]]
    assert upward(staged) == ["sandbox/job.py:9 imports tests.acceptance"]

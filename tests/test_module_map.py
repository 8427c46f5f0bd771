"""The README's module map names exactly the modules of the four packages, and
module-level imports only go down the layers (workers → orchestrator → sandbox → broker)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("broker", "sandbox", "orchestrator", "workers")  # lowest first
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


def _module_level_imports(tree: ast.Module) -> list[str]:
    names: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_module_level_imports_only_go_down_the_layers() -> None:
    upward = []
    for module in sorted(_modules()):
        layer = LAYERS.index(module.split("/", 1)[0])
        tree = ast.parse((ROOT / module).read_text(encoding="utf-8"))
        for name in _module_level_imports(tree):
            top = name.split(".", 1)[0]
            if top in LAYERS and LAYERS.index(top) > layer:
                upward.append(f"{module} imports {name}")
    assert not upward, upward

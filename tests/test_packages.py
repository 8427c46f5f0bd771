"""Each package names its API in ``__all__``; importing a package loads none of it (the
names come from their modules on first use), and every name is the object its module
defines."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.exports import type_checking_imports

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("broker", "sandbox", "orchestrator", "workers")
NOT_AN_API = {"broker/migrations/versions/__init__.py"}  # Alembic's revision directory
HEAVY = ("sqlalchemy", "pydantic", "pydantic_settings", "httpx", "celery", "docker", "redis",
         "rich", "typer")


def _inits() -> list[Path]:
    return sorted(p for layer in LAYERS for p in (ROOT / layer).rglob("__init__.py")
                  if "__pycache__" not in p.parts
                  and p.relative_to(ROOT).as_posix() not in NOT_AN_API)


def _package(init: Path) -> str:
    return ".".join(init.relative_to(ROOT).parent.parts)


def _literal_all(init: Path) -> list[str] | None:
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return list(ast.literal_eval(node.value))
    return None


@pytest.mark.parametrize("init", _inits(), ids=lambda p: _package(p))
def test_every_package_names_its_api(init: Path) -> None:
    names = _literal_all(init)
    assert names, f"{init.relative_to(ROOT)} has no literal __all__"
    assert len(set(names)) == len(names)
    package = importlib.import_module(_package(init))
    homes = type_checking_imports(init)
    for name in names:
        value = getattr(package, name)
        if name in homes:  # re-exported: the very object its module defines
            assert value is getattr(importlib.import_module(homes[name]), name), name
    assert not set(homes) - set(names), f"imported for type checkers, not in __all__: " \
        f"{sorted(set(homes) - set(names))}"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import broker

    with pytest.raises(AttributeError, match="'broker' has no attribute 'Nothing'"):
        broker.Nothing  # noqa: B018


def test_importing_the_packages_loads_none_of_their_dependencies() -> None:
    """No import side effects: the packages and their re-exports load nothing until a name
    is used (and using one loads only its module's dependencies)."""
    loaded = "' '.join(sorted(m for m, v in sys.modules.items() if v is not None))"
    probe = ("import sys\n"
             "import broker, broker.providers, sandbox, orchestrator, orchestrator.models, "
             "orchestrator.demo, workers\n"
             f"print({loaded})\n"
             "print(' '.join(sorted(m for m, v in sys.modules.items() if v is None)))\n"
             "from broker import Identity\n"
             f"print({loaded})\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    assert done.returncode == 0, done.stderr
    bare, blocked, identity = (set(line.split()) for line in done.stdout.splitlines())
    # The one thing importing broker does: block httpx's command-line client (its rich,
    # pygments and click), an entry of None in sys.modules that loads nothing.
    assert blocked == {"httpx._main"}
    assert sorted(m for m in bare if m.split(".")[0] in HEAVY) == []
    assert "broker.identity" in identity and "broker.identity" not in bare
    assert "broker.sqlstore" not in identity

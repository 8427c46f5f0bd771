"""The skill document a model receives, with the capability catalog generated from code.

The one copy of the text is ``orchestrator/skill.md`` (shipped in the package;
``docs/skill.md`` points to it). Its ``{{CATALOG}}`` marker is replaced by
``catalog_markdown()`` at render time, so the catalog the model sees is always
the one the broker enforces.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from importlib.resources import files
from typing import Any

from broker.catalog import CATALOG, Capability

CATALOG_MARKER = "{{CATALOG}}"


def skill_template() -> str:
    return files("orchestrator").joinpath("skill.md").read_text(encoding="utf-8")


def _type_of(prop: Mapping[str, Any]) -> str:
    if "anyOf" in prop:
        return " | ".join(_type_of(p) for p in prop["anyOf"])
    kind = prop.get("type")
    return str(kind) if kind else "any JSON"


def _field(name: str, prop: Mapping[str, Any], required: bool) -> str:
    text = f"`{name}`: {_type_of(prop)}"
    limits = [f"{word} {prop[key]}" for key, word in
              (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
               ("exclusiveMaximum", "<")) if key in prop]
    if limits:
        text += f" ({', '.join(limits)})"
    if required:
        return text + ", required"
    if "default" in prop:
        return text + f", default {json.dumps(prop['default'])}"
    return text


def capability_markdown(cap: Capability) -> str:
    schema = cap.input_schema()
    required = set(schema.get("required", []))
    fields = "; ".join(_field(n, p, n in required)
                       for n, p in schema.get("properties", {}).items())
    effect = "side-effecting" if cap.side_effecting else "read-only"
    where = "production" if cap.production else "catalog-only (dry run, no real provider)"
    return (f"* **`{cap.name}`**: {cap.description} {effect}; {where}; "
            f"price {cap.unit_price:g} per call.\n  Payload: {fields}.")


def catalog_markdown(catalog: Mapping[str, Capability] = CATALOG,
                     grants: Iterable[str] | None = None) -> str:
    granted = set(grants) if grants is not None else None
    lines = [capability_markdown(cap) for name, cap in sorted(catalog.items())
             if granted is None or name in granted]
    if not lines:
        return "(no capability is granted to this run)"
    if granted is not None:
        lines.append("\nOnly these capabilities are granted to this run; others are refused.")
    return "\n".join(lines)


def render_skill(catalog: Mapping[str, Capability] = CATALOG,
                 grants: Iterable[str] | None = None) -> str:
    """The skill document with the catalog (restricted to ``grants`` when given)."""
    return skill_template().replace(CATALOG_MARKER, catalog_markdown(catalog, grants))


def main(argv: list[str]) -> int:
    """``python -m orchestrator.skill``: print the rendered document."""
    sys.stdout.write(render_skill())
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

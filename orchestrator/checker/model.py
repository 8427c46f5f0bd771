"""Value objects the checker returns: one Violation per finding, one CheckReport per script."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

RULE_IDS: tuple[str, ...] = tuple(f"R{i:02d}" for i in range(13))

RULE_TITLES: dict[str, str] = {
    "R00": "parse and size limits",
    "R01": "entry point and top-level shape",
    "R02": "ctx API surface",
    "R03": "statically bounded loops",
    "R04": "determinism",
    "R05": "guarded fanout",
    "R06": "attribute access by allowlist, no string formatting",
    "R07": "builtins by allowlist, no undefined names",
    "R08": "capability name from the catalog",
    "R09": "no broad except",
    "R10": "no imports, _site reserved, plain ctx.run arguments (take=N only)",
    "R11": "forbidden constructs, no exit from finally, read-only top-level constants",
    "R12": "no recursion",
}

SEVERITIES: frozenset[str] = frozenset({"error", "warning"})


@dataclass(frozen=True)
class Violation:
    """One finding: which rule, where, what is wrong and exactly how to fix it."""

    rule: str
    line: int
    message: str
    hint: str
    severity: str = "error"

    def __post_init__(self) -> None:
        if self.rule not in RULE_TITLES:
            raise ValueError(f"unknown rule id {self.rule!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    @property
    def sort_key(self) -> tuple[int, str, str]:
        return (self.line, self.rule, self.message)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "line": self.line, "message": self.message,
                "hint": self.hint, "severity": self.severity}


def empty_facts() -> dict[str, Any]:
    return {"capability_calls": 0, "capabilities": [], "functions": []}


@dataclass(frozen=True)
class CheckReport:
    """The checker's verdict. ``valid`` is False as soon as one error-severity violation exists."""

    valid: bool
    violations: tuple[Violation, ...]
    facts: dict[str, Any] = field(default_factory=empty_facts)

    @classmethod
    def from_violations(cls, violations: list[Violation] | tuple[Violation, ...],
                        facts: dict[str, Any] | None = None) -> CheckReport:
        facts = facts if facts is not None else empty_facts()
        if not violations:
            return cls(valid=True, violations=(), facts=facts)
        unique = sorted(set(violations), key=lambda v: v.sort_key)
        valid = not any(v.severity == "error" for v in unique)
        return cls(valid=valid, violations=tuple(unique), facts=facts)

    def rules(self) -> list[str]:
        """The rule ids that fired, sorted and deduplicated (handy in tests and logs)."""
        return sorted({v.rule for v in self.violations})

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid,
                "violations": [v.to_json() for v in self.violations],
                "facts": {"capability_calls": self.facts.get("capability_calls", 0),
                          "capabilities": list(self.facts.get("capabilities", [])),
                          "functions": list(self.facts.get("functions", []))}}

"""Static script checker: rules R00-R12 over the AST; never executes the script.

    from orchestrator.checker import check
    report = check(source)            # CheckReport(valid, violations, facts)
    report.to_json()                  # {"valid", "violations": [...], "facts": {...}}

The rule table is documented for humans and models in docs/rules.md.
"""

from .core import RULES, check
from .model import RULE_IDS, RULE_TITLES, CheckReport, Violation

__all__ = ["RULES", "RULE_IDS", "RULE_TITLES", "CheckReport", "Violation", "check"]

"""The run-wide paid-payload ledger: (run, capability, digest) -> where it was paid.

A call at a new identity whose normalized payload (and take) was already paid
anywhere in the run by another revision (an earlier one, or a concurrent one that
committed first) is a *semantic repeat*. The policy
decides what happens: off | warn | deny | auto (auto denies a side-effecting
capability and warns for a read-only one). A deliberate second take is
declared in the script (``ctx.run(..., take=2)``, part of the digest), never
inferred.

The revision's host decides from the prefix it loaded (``broker.prefix``), and
the claim transaction it runs for the wave's new calls decides against every slot
and every attempt that may have paid (``broker.claim_txns``): the run store is the
ledger, in embedded mode and in a deployment alike.
"""

from __future__ import annotations

from enum import StrEnum

from broker.catalog import Capability
from broker.settings import LedgerPolicy


class LedgerAction(StrEnum):
    NONE = "none"
    WARN = "warn"
    DENY = "deny"


def ledger_action(policy: LedgerPolicy, capability: Capability) -> LedgerAction:
    """auto: deny a repeat of a side-effecting capability, warn for a read-only one."""
    if policy is LedgerPolicy.OFF:
        return LedgerAction.NONE
    if policy is LedgerPolicy.WARN:
        return LedgerAction.WARN
    if policy is LedgerPolicy.DENY:
        return LedgerAction.DENY
    return LedgerAction.DENY if capability.side_effecting else LedgerAction.WARN

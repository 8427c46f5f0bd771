"""The runtime rule at dispatch (pure).

For a call (ι, c, p): committed with the same capability and digest → replay;
committed with a different one → divergence; not committed → execute.
"""

from __future__ import annotations

from enum import StrEnum

from broker.records import SlotRecord


class Decision(StrEnum):
    REPLAY = "replay"
    DIVERGE = "diverge"
    EXECUTE = "execute"


def decide(slot: SlotRecord | None, capability: str, digest: str) -> Decision:
    if slot is None:
        return Decision.EXECUTE
    if slot.same_call(capability, digest):
        return Decision.REPLAY
    return Decision.DIVERGE

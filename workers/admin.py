"""Operator tasks on the ``reconcile`` queue.

``reconcile_attempt(run_id, identity, result=None, operator=..., reason=...)``:
with a result the identity is committed with it (replays from then on, zero
executions); without one the attempt is abandoned (the identity may execute
once more). A result is checked against the capability's result shape and the
artifact store first (``orchestrator.reconcile_input``). Every decision is
recorded with operator, reason and time.
"""

from __future__ import annotations

from typing import Any

from broker.artifacts import FileArtifactStore
from orchestrator.reconcile import reconcile_attempt as decide
from workers.app import ReviseTask, app
from workers.routing import RECONCILE_TASK


@app.task(name=RECONCILE_TASK, bind=True)
def reconcile_attempt(self: ReviseTask, run_id: str, identity: str, result: Any = None, *,
                      operator: str, reason: str) -> dict[str, Any]:
    kwargs = {} if result is None else {"result": result}
    return decide(self.context.store, run_id, identity, operator=operator, reason=reason,
                  artifacts=FileArtifactStore(self.context.settings.artifacts_dir), **kwargs)

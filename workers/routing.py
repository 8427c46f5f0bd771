"""Queues and task routes, in one place.

Each role has its own queue and its own worker processes: the dispatcher
(``dispatch``), the sandbox workers (``sandbox``), the broker workers
(``capabilities``) and the reconciler (``reconcile``). Scale a role by
starting more workers on its queue (``-Q capabilities`` on N hosts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kombu import Queue

DISPATCH_TASK = "revise.dispatch"
SANDBOX_TASK = "revise.sandbox"
CAPABILITY_TASK = "revise.capability"
SWEEP_TASK = "revise.reconcile.sweep"

ROLES = ("dispatch", "sandbox", "capabilities", "reconcile")


@dataclass(frozen=True)
class Routing:
    prefix: str = ""

    def queue(self, role: str) -> str:
        if role not in ROLES:
            raise ValueError(f"unknown queue role {role!r}; roles: {', '.join(ROLES)}")
        return f"{self.prefix}{role}"

    def queues(self) -> tuple[Queue, ...]:
        return tuple(Queue(self.queue(role), routing_key=self.queue(role)) for role in ROLES)

    def routes(self) -> dict[str, dict[str, str]]:
        """Task name → queue. The reconcile tasks route by their ``revise.reconcile.`` prefix."""
        return {
            DISPATCH_TASK: {"queue": self.queue("dispatch")},
            SANDBOX_TASK: {"queue": self.queue("sandbox")},
            CAPABILITY_TASK: {"queue": self.queue("capabilities")},
            "revise.reconcile.*": {"queue": self.queue("reconcile")},
        }


def enqueue(app: Any, task: str, queue: str, **options: Any) -> Any:
    """Send ``task`` to ``queue`` without declaring the queue on the way: the default
    exchange routes by queue name, and each role's workers declare the queue they consume.
    (Declaring costs a Redis round trip per message, and under load a connection per
    sending thread.)"""
    return app.send_task(task, queue=queue, declare=[], **options)

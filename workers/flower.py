"""Flower for the deployment: ``python -m workers.flower [flower options]``.

Stock Flower inspects the workers once, when it starts; a worker that comes up
after it (honcho starts everything at once, a scaled worker joins later) stays
missing from ``/api/workers`` until someone asks with ``?refresh=1``. This
launcher runs the same ``celery -A workers.app flower`` command with one change:
the first event heard from a worker Flower has not inspected yet (its
``worker-online``, or a heartbeat after Flower restarted) inspects that worker.
"""

from __future__ import annotations

import sys
from typing import Any

from flower import command
from flower.app import Flower

_WORKER_EVENTS = frozenset({"worker-online", "worker-heartbeat"})


class ReviseFlower(Flower):
    def start(self) -> None:
        heard = self.events.on_event

        def on_event(event: dict[str, Any]) -> None:  # runs on the events thread
            heard(event)
            name = event.get("hostname")
            if event.get("type") in _WORKER_EVENTS and name and name not in self.workers:
                self.io_loop.add_callback(self.update_workers, name)

        # Events.run() binds its receiver's handler when the thread starts, in start().
        self.events.on_event = on_event  # type: ignore[method-assign]
        super().start()


def main(argv: list[str] | None = None) -> None:
    from celery.bin.celery import main as celery_main

    command.Flower = ReviseFlower  # type: ignore[misc]  # the one class flower() builds
    sys.argv = ["celery", "-A", "workers.app", "flower", *(sys.argv[1:] if argv is None
                                                          else argv)]
    celery_main()


if __name__ == "__main__":
    main()

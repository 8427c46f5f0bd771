"""Flower for the deployment: ``python -m workers.flower [--in-container] [flower options]``.

Stock Flower inspects the workers once, when it starts; a worker that comes up
after it (honcho starts everything at once, a scaled worker joins later) stays
missing from ``/api/workers`` until someone asks with ``?refresh=1``. This
launcher runs the same ``celery -A workers.app flower`` command with two changes:
the first event heard from a worker Flower has not inspected yet (its
``worker-online``, or a heartbeat after Flower restarted) inspects that worker; and
it listens where ``REVISE_FLOWER_ADDRESS`` and ``REVISE_FLOWER_PORT`` say, with
``REVISE_FLOWER_AUTH`` as Flower's basic auth (handed over in Flower's own
``FLOWER_BASIC_AUTH`` variable, never on the command line where ``ps`` shows it).

Flower can shut workers down and revoke tasks, so it refuses to be reachable from other
hosts without authentication: an address that is not loopback needs
``REVISE_FLOWER_AUTH`` (or Flower's own ``--basic-auth`` / ``--auth`` OAuth options).
``--in-container`` listens on every interface of its container (compose publishes the
port on the host at ``REVISE_FLOWER_ADDRESS``, which is then the address judged).
Which workers and tasks it sees is the app's: events and control are this stack's only
(``workers.app``, per ``REVISE_CELERY_QUEUE_PREFIX``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from typing import Any

from flower import command
from flower.app import Flower

from broker.settings import SettingsError
from workers.config import FlowerSettings

_WORKER_EVENTS = frozenset({"worker-online", "worker-heartbeat"})
IN_CONTAINER = "--in-container"


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


def _given(options: list[str], name: str) -> bool:
    return any(o == name or o.startswith(f"{name}=") for o in options)


def flower_options(settings: FlowerSettings, options: list[str],
                   environ: MutableMapping[str, str]) -> list[str]:
    """Flower's command-line options for these settings (options given win), after
    checking that Flower is not reachable from other hosts without authentication;
    REVISE_FLOWER_AUTH goes to ``environ`` as Flower's FLOWER_BASIC_AUTH."""
    in_container = IN_CONTAINER in options
    options = [o for o in options if o != IN_CONTAINER]
    if settings.auth is not None:
        environ["FLOWER_BASIC_AUTH"] = settings.auth.get_secret_value()
    authenticated = settings.auth is not None or any(
        _given(options, o) for o in ("--basic-auth", "--basic_auth", "--auth")) or any(
        environ.get(v) for v in ("FLOWER_BASIC_AUTH", "FLOWER_AUTH"))
    problem = settings.unauthenticated_problem()
    if problem is not None and not authenticated:
        raise SettingsError(problem, problems=[problem])
    extra = []
    if not _given(options, "--address"):
        extra.append(f"--address={'0.0.0.0' if in_container else settings.address}")
    if not _given(options, "--port"):
        extra.append(f"--port={5555 if in_container else settings.port}")
    return [*extra, *options]


def main(argv: list[str] | None = None) -> None:
    from celery.bin.celery import main as celery_main

    try:
        given = list(sys.argv[1:] if argv is None else argv)
        options = flower_options(FlowerSettings(), given, os.environ)
    except SettingsError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    command.Flower = ReviseFlower  # type: ignore[misc]  # the one class flower() builds
    sys.argv = ["celery", "-A", "workers.app", "flower", *options]
    celery_main()


if __name__ == "__main__":
    main()

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
port on the host at ``REVISE_FLOWER_ADDRESS``, which is then the address judged). An
address it cannot listen on (most often the port of an earlier stack's Flower, still
running) stops it with one line that says so, not Tornado's traceback.
Which workers and tasks it sees is the app's: events and control are this stack's only
(``workers.app``, per ``REVISE_CELERY_QUEUE_PREFIX``).
"""

from __future__ import annotations

import errno
import os
import socket
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


def _option(options: list[str], name: str) -> str | None:
    """The value of ``--name=V`` or ``--name V`` (the last one given wins, as in Flower)."""
    found = None
    for index, option in enumerate(options):
        if option.startswith(f"{name}="):
            found = option.split("=", 1)[1]
        elif option == name and index + 1 < len(options):
            found = options[index + 1]
    return found


def listen_problem(options: list[str]) -> str | None:
    """Why Flower could not listen where ``options`` say, found by binding there first as
    Tornado will (SO_REUSEADDR), or None. Tornado's own answer is a 37-line traceback,
    and honcho stops the whole stack when Flower exits."""
    address, port = _option(options, "--address") or "", _option(options, "--port") or ""
    try:
        infos = socket.getaddrinfo(address or None, int(port), socket.AF_UNSPEC,
                                   socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except (OSError, ValueError):
        return None  # an address or port Flower itself will name
    shown = f"[{address}]:{port}" if ":" in address else f"{address or '*'}:{port}"
    for family, kind, proto, _, where in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:  # as Tornado: the IPv4 address is bound apart
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(where)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return (f"Flower cannot listen on {shown}: the address is already in "
                            f"use (REVISE_FLOWER_PORT={port}), most likely by the Flower of "
                            "an earlier stack still running; find it with `ss -ltnp "
                            f"'sport = :{port}'` or `pgrep -af 'workers.flower|celery -A "
                            "workers.app'` and stop it, or set REVISE_FLOWER_PORT to a "
                            "free port")
                return (f"Flower cannot listen on {shown}: {exc.strerror or exc}; check "
                        "REVISE_FLOWER_ADDRESS and REVISE_FLOWER_PORT")
    return None


def main(argv: list[str] | None = None) -> None:
    from celery.bin.celery import main as celery_main

    try:
        given = list(sys.argv[1:] if argv is None else argv)
        options = flower_options(FlowerSettings(), given, os.environ)
    except SettingsError as exc:
        raise SystemExit(f"error: {exc.message}") from None
    problem = listen_problem(options)
    if problem is not None:
        raise SystemExit(f"error: {problem}")
    command.Flower = ReviseFlower  # type: ignore[misc]  # the one class flower() builds
    sys.argv = ["celery", "-A", "workers.app", "flower", *options]
    celery_main()


if __name__ == "__main__":
    main()

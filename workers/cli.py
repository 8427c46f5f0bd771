"""The ``revise`` program: the host's commands (``orchestrator.cli``) and those that need
the queue or every layer's settings: ``revise submit``, ``revise config``, and
``revise repair``, whose candidates run embedded or through the workers
(``REVISE_REPAIR_VIA``).

Composed here, at the top layer, so that no lower package imports the queue.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

import typer

from orchestrator.cli import app
from orchestrator.repair_cli import CandidateTarget
from orchestrator.repair_cli import register as register_repair
from workers.config_cli import register as register_config
from workers.submit_cli import check_queue_settings
from workers.submit_cli import register as register_submit

if TYPE_CHECKING:
    from broker.settings import Settings

__all__ = ["app", "main"]


def _repair_target(settings: Settings, timeout: float) -> CandidateTarget:
    # Loaded on use: `revise --help` stays fast (the target loads pydantic and Celery).
    check_queue_settings()
    from workers.repair_via import RepairTarget

    return RepairTarget(settings, timeout=timeout)


@app.callback()
def _warn_unknown_variables(ctx: typer.Context) -> None:
    """A REVISE_* variable nothing reads is one warning line for every command but
    `revise config`, which reports it as its output."""
    if ctx.invoked_subcommand != "config":
        from workers.variables import warn_unknown

        warn_unknown(os.environ)


register_repair(app, open_target=_repair_target)
register_submit(app)
register_config(app)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if "--json" not in sys.argv[1:]:
        app()
        return
    # Under --json a refusal of the command line (a missing argument, a value of the wrong
    # type) is one JSON error on stdout too, as every other refusal is.
    from broker.errors import InputError
    from orchestrator.cli_common import EXIT_USAGE, emit_json

    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        sys.exit(1)
    except Exception as exc:
        # click's ClickException (typer vendors click: matched by what it offers)
        if not (hasattr(exc, "format_message") and hasattr(exc, "show")):
            raise
        exc.show()
        emit_json({"error": InputError(exc.format_message()).to_json()})
        sys.exit(getattr(exc, "exit_code", None) or EXIT_USAGE)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()

"""The ``revise`` program: the host's commands (``orchestrator.cli``) and those that need
the queue or every layer's settings: ``revise submit``, ``revise config``, and
``revise repair``, whose candidates run embedded or through the workers
(``REVISE_REPAIR_VIA``).

Composed here, at the top layer, so that no lower package imports the queue.
"""

from __future__ import annotations

import logging
import os
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
    app()


if __name__ == "__main__":
    main()

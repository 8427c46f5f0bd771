"""``revise submit``: ``revise run`` through the Celery deployment.

With ``--wait`` it prints the same object as ``revise run`` and exits the same
way (0 succeeded, 1 the run failed or stopped); 3 (``EXIT_UNKNOWN``) when it could
not tell yet: the timeout passed, or the store or Redis did not answer for that
long (a progress line on stderr says what it waits for, never a traceback).
Without it, the job id to follow in Flower or with ``revise show``.
"""

import logging
from pathlib import Path
from typing import Annotated

import typer

from orchestrator import render
from orchestrator.cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNKNOWN,
    JsonFlag,
    RunId,
    emit,
    err,
    guard,
    read_script,
)


def register(app: typer.Typer) -> None:
    @app.command("submit")
    @guard
    def submit_cmd(
        script: Path, run_id: RunId,
        args: Annotated[Path | None, typer.Option("--args", help="JSON file with the args")
                        ] = None,
        envelope: Annotated[Path | None, typer.Option("--envelope", help="JSON/YAML envelope")
                            ] = None,
        wait: Annotated[bool, typer.Option("--wait", help="wait and print the run JSON")
                        ] = False,
        timeout: Annotated[float, typer.Option("--timeout", help="seconds --wait waits")
                           ] = 900.0,
        as_json: JsonFlag = False,
    ) -> None:
        """Queue SCRIPT as run R on the Celery deployment (same checks and result as run).

        On an existing run, the args and envelope stored with its latest revision are
        reused unless --args / --envelope are given (a note on stderr says which).
        """
        from broker.envelope import load_envelope
        from broker.settings import Settings
        from orchestrator.inputs import MISSING, ArgsFile, resolve_inputs
        from workers.client import Client

        # Celery's result backend logs its reconnect attempts with tracebacks; an outage
        # reaches the user as one named error or a progress line instead.
        logging.getLogger("celery.backends").setLevel(logging.CRITICAL + 1)

        source = read_script(script)
        given_args = ArgsFile(args) if args is not None else MISSING
        given_env = load_envelope(envelope) if envelope else None
        client = Client(Settings())
        try:
            # The client reads the run store anyway (for results); the inputs are
            # resolved here, before anything is queued.
            inputs = resolve_inputs(client.store, run_id, args=given_args,
                                    envelope=given_env)
            for note in inputs.notes():
                err.print(f"[yellow]note[/]: {render.escape(note)}")
            handle = client.submit(source, inputs.args, inputs.envelope, run_id)
            if not wait:
                data = {"job_id": handle.job_id, "run_id": run_id, "status": "queued"}
                emit(as_json, data, lambda c: c.print(
                    f"queued job {handle.job_id} for run {run_id}; follow it with "
                    f"`revise show {run_id}`"))
                raise typer.Exit(EXIT_OK)
            try:
                report = handle.wait(timeout, progress=lambda line: err.print(
                    f"[yellow]waiting[/]: {render.escape(line)}"))
            except TimeoutError as exc:
                err.print(f"[yellow]timeout[/]: {render.escape(str(exc))}")
                raise typer.Exit(EXIT_UNKNOWN) from None
        finally:
            client.close()
        emit(as_json, report, lambda c: render.run_report(c, report))
        raise typer.Exit(EXIT_OK if report["status"] == "succeeded" else EXIT_FAILED)

"""``revise submit``: ``revise run`` through the Celery deployment.

With ``--wait`` it prints the same object as ``revise run`` and exits the same
way (0 succeeded, 1 the run failed or stopped); 3 (``EXIT_UNKNOWN``) when it could
not tell yet: the timeout passed, or the store or Redis did not answer for that
long (a progress line on stderr says what it waits for, never a traceback).
Without it, the job id to follow in Flower or with ``revise show``.
"""

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

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
        settings = Settings()
        client = Client(settings)
        deadline = time.monotonic() + timeout
        try:
            # The client reads the run store anyway (for results); the inputs are
            # resolved here, before anything is queued. A client started during an outage
            # waits it out (within --timeout) like one that was already waiting.
            _until_up(deadline, "looking for a running revision of the run",
                      lambda: refuse_if_busy(client.store, run_id,
                                             settings.revision_lease_seconds))
            inputs = _until_up(deadline, "reading the run's stored inputs",
                               lambda: resolve_inputs(client.store, run_id, args=given_args,
                                                      envelope=given_env))
            for note in inputs.notes():
                err.print(f"[yellow]note[/]: {render.escape(note)}")
            handle = _until_up(deadline, "queueing the job", lambda: client.submit(
                source, inputs.args, inputs.envelope, run_id, send=False))
            _until_up(deadline, "queueing the job", handle.send)
            if not wait:
                data = {"job_id": handle.job_id, "run_id": run_id, "status": "queued"}
                emit(as_json, data, lambda c: c.print(
                    f"queued job {handle.job_id} for run {run_id}; follow it with "
                    f"`revise show {run_id}`"))
                raise typer.Exit(EXIT_OK)
            try:
                report = _wait(handle, max(deadline - time.monotonic(), 0.0),
                               since=deadline - timeout)
            except TimeoutError as exc:
                err.print(f"[yellow]timeout[/]: {render.escape(str(exc))}")
                raise typer.Exit(EXIT_UNKNOWN) from None
        finally:
            client.close()
        emit(as_json, report, lambda c: render.run_report(c, report))
        raise typer.Exit(EXIT_OK if report["status"] == "succeeded" else EXIT_FAILED)


T = TypeVar("T")


def refuse_if_busy(store: Any, run_id: str, lease_seconds: float) -> None:
    """One revision of a run runs at a time: a submit while one runs is refused here, before
    anything is queued (the dispatcher would refuse the job, unseen without --wait). A
    revision whose runner is gone is failed first, as the dispatcher does."""
    from broker.errors import RunBusy
    from orchestrator.reconcile import sweep_revisions

    sweep_revisions(store, lease_seconds, run_id=run_id)
    running = store.running_revisions(run_id)
    if running:
        revision = running[0].revision
        raise RunBusy(f"run {run_id!r} has revision {revision} still running; one revision "
                      "of a run runs at a time, so that two never pay for the same call. "
                      f"Wait for it (`revise show {run_id}` shows it running until it ends) "
                      "and submit again", run_id=run_id, revision=revision)


def _wait(handle: Any, timeout: float, since: float) -> dict[str, Any]:
    """The job's run JSON. On a terminal, a status line on stderr says where it is (calls
    committed, in flight, parked); without one, only an outage is said. A timeout says
    how long the command waited, from ``since``."""
    def outage(line: str) -> None:
        err.print(f"[yellow]waiting[/]: {render.escape(line)}")

    if not err.is_terminal:
        return handle.wait(timeout, progress=outage, since=since)
    with err.status("waiting for the job", spinner="dots") as status:
        return handle.wait(timeout, progress=outage, since=since, watch=lambda line:
                           status.update(f"waiting: {render.escape(line)}"))


def _until_up(deadline: float, what: str, action: Callable[[], T]) -> T:
    """``action()``, again while the store or Redis does not answer (a progress line on
    stderr about every 5 s); past ``deadline`` the outage is the answer: exit 3."""
    from workers.client import TRANSIENT

    said = 0.0
    while True:
        try:
            return action()
        except TRANSIENT as exc:
            if time.monotonic() >= deadline:
                err.print(f"[yellow]timeout[/]: {render.escape(what)}: "
                          f"{render.escape(exc.message)}")
                raise typer.Exit(EXIT_UNKNOWN) from None
            if time.monotonic() - said > 5:
                err.print(f"[yellow]waiting[/]: {render.escape(what)}, because "
                          f"{render.escape(exc.message)}")
                said = time.monotonic()
            time.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))

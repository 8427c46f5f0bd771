"""``revise submit``: ``revise run`` through the Celery deployment.

With ``--wait`` it prints the same object as ``revise run`` and exits the same
way (0 succeeded, 1 the run failed or stopped); 3 (``EXIT_UNKNOWN``) when it could
not tell yet: the timeout passed, or the store or Redis did not answer for that
long (a progress line on stderr says what it waits for, never a traceback).
Without it, the job id to follow in Flower or with ``revise show``; an outage is then
waited out only briefly (``OUTAGE_GRACE_SECONDS``, or ``--timeout``) before exit 3.
"""

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer

from broker.errors import InputError, QueueError, ReviseError
from orchestrator import render
from orchestrator.cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_UNKNOWN,
    EXIT_USAGE,
    JsonFlag,
    RunId,
    emit,
    emit_json,
    err,
    guard,
    read_script,
)

# What --timeout is when it is not given: with --wait, how long the wait lasts; without it,
# how long an outage of the store or Redis is waited out before the command says so (a
# submit that only queues must answer in seconds, not after the wait's 15 minutes).
WAIT_SECONDS = 900.0
OUTAGE_GRACE_SECONDS = 5.0
EXIT_CODES_HELP = (
    f"Exit codes: {EXIT_OK} queued (with --wait: the run succeeded); {EXIT_FAILED} the run "
    f"failed or stopped, or the job was refused; {EXIT_USAGE} bad input or configuration "
    f"(a file, an option, a setting); {EXIT_UNKNOWN} could not tell yet: --timeout passed "
    "(the job is not cancelled: it goes on, or waits for a worker), or the store or Redis "
    "did not answer for that long.")


def register(app: typer.Typer) -> None:
    @app.command("submit", epilog=EXIT_CODES_HELP)
    @guard
    def submit_cmd(
        script: Path, run_id: RunId,
        args: Annotated[Path | None, typer.Option("--args", help="JSON file with the args")
                        ] = None,
        envelope: Annotated[Path | None, typer.Option("--envelope", help="JSON/YAML envelope")
                            ] = None,
        wait: Annotated[bool, typer.Option("--wait", help="wait and print the run JSON")
                        ] = False,
        timeout: Annotated[float | None, typer.Option(
            "--timeout", help=f"seconds --wait waits (default {WAIT_SECONDS:.0f}); without "
            "--wait, seconds an outage of the store or Redis is waited out (default "
            f"{OUTAGE_GRACE_SECONDS:.0f})", show_default=False)] = None,
        as_json: JsonFlag = False,
    ) -> None:
        """Queue SCRIPT as run R on the Celery deployment (same checks and result as run).

        On an existing run, the args and envelope stored with its latest revision are
        reused unless --args / --envelope are given (a note on stderr says which).
        """
        from broker.envelope import load_envelope
        from broker.settings import Settings
        from orchestrator.inputs import MISSING, ArgsFile

        # Celery's result backend logs its reconnect attempts with tracebacks; an outage
        # reaches the user as one named error or a progress line instead.
        logging.getLogger("celery.backends").setLevel(logging.CRITICAL + 1)

        seconds = _seconds(timeout, wait)
        source = read_script(script)
        given_args = ArgsFile(args) if args is not None else MISSING
        given_env = load_envelope(envelope) if envelope else None
        settings = Settings()
        client = _open_client(settings)
        deadline = time.monotonic() + seconds
        try:
            handle = _queue(client, run_id, source, (given_args, given_env),
                            lease_seconds=settings.revision_lease_seconds,
                            patience=_Patience(deadline, as_json))
            if not wait:
                data = {"job_id": handle.job_id, "run_id": run_id, "status": "queued"}
                emit(as_json, data, lambda c: c.print(
                    f"queued job {handle.job_id} for run {run_id}; follow it with "
                    f"`revise show {run_id}`"))
                raise typer.Exit(EXIT_OK)
            try:
                report = _wait(handle, max(deadline - time.monotonic(), 0.0),
                               since=deadline - seconds)
            except TimeoutError as exc:
                timed_out = QueueError(str(exc), job_id=handle.job_id)
                _cannot_tell(as_json, timed_out, timed_out.message)
        finally:
            client.close()
        emit(as_json, report, lambda c: render.run_report(c, report))
        raise typer.Exit(EXIT_OK if report["status"] == "succeeded" else EXIT_FAILED)


def _seconds(timeout: float | None, wait: bool) -> float:
    """--timeout, checked (a negative or NaN one would make every deadline a lie)."""
    if timeout is None:
        return WAIT_SECONDS if wait else OUTAGE_GRACE_SECONDS
    if not (math.isfinite(timeout) and timeout >= 0):
        raise InputError(f"--timeout {timeout:g}: give a number of seconds, 0 or more",
                         field="--timeout", value=f"{timeout:g}")
    return timeout


def _open_client(settings: Any) -> Any:
    check_queue_settings()
    from workers.client import Client

    return Client(settings)


def check_queue_settings() -> None:
    """Read the queue's settings before ``workers.app`` is imported: that module builds them
    as it loads and stops the process on a refused one with a plain line (right for a
    worker); here it is a SettingsError, as for every command (exit 2, JSON under --json)."""
    from workers.config import WorkerSettings

    WorkerSettings()


@dataclass(frozen=True)
class _Patience:
    """How long an outage is waited out, and how the command says it gave up."""

    deadline: float
    as_json: bool


def _queue(client: Any, run_id: str, source: bytes, given: tuple[Any, Any], *,
           lease_seconds: float, patience: _Patience) -> Any:
    """The job, sent: refused while a revision of the run runs, its inputs resolved
    before anything is queued. The client reads the run store anyway (for results); a
    client started during an outage waits it out (within ``patience``) like one that was
    already waiting."""
    from orchestrator.inputs import resolve_inputs

    given_args, given_env = given
    _until_up(patience, "looking for a running revision of the run",
              lambda: refuse_if_busy(client.store, run_id, lease_seconds))
    inputs = _until_up(patience, "reading the run's stored inputs",
                       lambda: resolve_inputs(client.store, run_id, args=given_args,
                                              envelope=given_env))
    for note in inputs.notes():
        err.print(f"[yellow]note[/]: {render.escape(note)}")
    handle = _until_up(patience, "queueing the job", lambda: client.submit(
        source, inputs.args, inputs.envelope, run_id, send=False))
    _until_up(patience, "queueing the job", handle.send)
    return handle


def _cannot_tell(as_json: bool, error: ReviseError, line: str) -> NoReturn:
    """Exit 3: ``line`` on stderr and, under --json, ``error`` as the one JSON object."""
    err.print(f"[yellow]timeout[/]: {render.escape(line)}")
    if as_json:
        emit_json({"error": error.to_json()})
    raise typer.Exit(EXIT_UNKNOWN)


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


def _until_up(patience: _Patience, what: str, action: Callable[[], T]) -> T:
    """``action()``, again while the store or Redis does not answer (a progress line on
    stderr about every 5 s); past the deadline the outage is the answer: exit 3."""
    from workers.client import TRANSIENT

    said = 0.0
    while True:
        try:
            return action()
        except TRANSIENT as exc:
            if time.monotonic() >= patience.deadline:
                _cannot_tell(patience.as_json, exc, f"{what}: {exc.message}")
            if time.monotonic() - said > 5:
                err.print(f"[yellow]waiting[/]: {render.escape(what)}, because "
                          f"{render.escape(exc.message)}")
                said = time.monotonic()
            time.sleep(min(1.0, max(patience.deadline - time.monotonic(), 0.0)))

"""`revise repair` and `revise author`, registered on the program by ``register(app, ...)``.

Shared helpers come from ``orchestrator.cli_common``; this module does not
import ``orchestrator.cli``, which registers it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, Protocol

import typer

from broker.errors import InputError
from orchestrator import render
from orchestrator.cli_common import (
    EXIT_CANDIDATE_FAILED,
    EXIT_FAILED,
    EXIT_MODEL_UNAVAILABLE,
    EXIT_NO_CANDIDATE,
    EXIT_OK,
    JsonFlag,
    emit_json,
    err,
    guard,
)
from orchestrator.cli_common import (
    out as stdout,
)

if TYPE_CHECKING:  # --help stays fast: pydantic, httpx and the models load on use
    from rich.console import Console

    from broker.envelope import Envelope
    from broker.settings import Settings
    from broker.store import RunStore
    from orchestrator.models import ModelEndpointError

# RepairResult.outcome -> exit code
REPAIR_EXIT = {"accepted": EXIT_OK, "succeeded": EXIT_OK, "failed": EXIT_CANDIDATE_FAILED,
               "no_candidate": EXIT_NO_CANDIDATE, "endpoint_failed": EXIT_MODEL_UNAVAILABLE}
EXIT_CODES_HELP = (
    f"Exit codes: {EXIT_OK} a candidate was accepted (with --execute: and its run "
    f"succeeded); {EXIT_CANDIDATE_FAILED} a candidate ran and did not succeed; 2 bad input "
    "or configuration (a file, an option, a REVISE_MODEL_* setting, a key or model the "
    f"endpoint refuses); {EXIT_NO_CANDIDATE} no admissible candidate within --max-attempts "
    f"rounds (nothing ran); {EXIT_MODEL_UNAVAILABLE} the model endpoint gave no usable "
    "answer after its retries (down, timed out, rate limited, malformed answers; see "
    "REVISE_MODEL_TIMEOUT_SECONDS, REVISE_MODEL_RETRIES, REVISE_MODEL_DEADLINE_SECONDS).")

ModelOpt = Annotated[str, typer.Option(
    "--model", help="recorded:PATH.jsonl, or a model name served by REVISE_MODEL_BASE_URL")]
EnvelopeOpt = Annotated[Path | None, typer.Option("--envelope", help="JSON/YAML envelope")]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}; pass a writable --out") from None


def _show_rounds(console: Console, result: Any) -> None:
    for attempt in result.attempts:
        label = f"round {attempt.attempt}/{result.max_rounds}"
        run = attempt.run
        if not attempt.accepted:
            console.print(f"{label}: [red]refused[/] by {', '.join(attempt.refused_by)} "
                          "(nothing ran, spent 0)")
        elif run is None:
            count = ("capability call(s) at most" if attempt.counted == "calls"
                     else "call expression(s)")
            console.print(f"{label}: [green]accepted[/] ({attempt.calls} {count})")
        else:
            how = (f"stopped by the runtime ([yellow]{run.refusal}[/])" if run.refusal
                   else render.escape(run.status))
            console.print(f"{label}: accepted, ran as revision {run.revision}: {how}; spent "
                          f"{run.spend:g} ({run.executed} provider call(s), {run.replayed} "
                          "replayed)")
        for ce in attempt.counterexamples:
            console.print(f"  gate {ce.kind}: {render.escape(ce.site)}")
        for v in attempt.violations if not attempt.accepted else ():
            console.print(f"  {v.rule} line {v.line}: {render.escape(v.message)}")
        if "call_count" in attempt.refused_by:
            _show_call_count(console, attempt)


def _show_call_count(console: Console, attempt: Any) -> None:
    if attempt.counted == "calls":
        short = "; ".join(f"{render.escape(s.capability)} {s.calls} < {s.required}"
                          for s in attempt.short)
        console.print(f"  calls (at most) {attempt.calls} < {attempt.required_calls}"
                      + (f": {short}" if short else ""))
        return
    lacks = ", ".join(f"line {c.line}" for c in attempt.dropped)
    console.print(f"  call expressions {attempt.calls} < {attempt.required_calls} (some calls "
                  "have no static bound)"
                  + (f"; lacks {lacks} of the failed script" if lacks else ""))


def _show_result(console: Console, result: Any, out: Path | None, run_id: str) -> None:
    _show_rounds(console, result)
    if result.run is not None or result.spend:
        console.print(f"spend on candidate runs: {result.spend:g} over {result.rewrites} "
                      "round(s)")
    if result.outcome == "endpoint_failed":
        console.print(f"[red]the model endpoint failed[/] after {result.rewrites} round(s): "
                      f"{render.escape(result.endpoint_error['message'])}")
    elif result.outcome == "no_candidate":
        console.print(f"[red]no admissible candidate[/] in {result.rewrites} round(s); "
                      "nothing was executed")
    elif result.run is not None:
        render.run_report(console, result.run)
    elif out is None:
        from rich.syntax import Syntax

        console.print(Syntax(result.candidate, "python"))
        console.print(f"run it with: revise run CANDIDATE.py --run-id {run_id} (or "
                      "pass --execute)")


class CandidateTarget(Protocol):
    """Where `revise repair --execute` runs an accepted candidate, and the store it reads."""

    via: Any  # what the report says (str(via)): embedded, queue

    @property
    def store(self) -> RunStore: ...

    def run(self, run_id: str, text: str, args: Any, envelope: Envelope
            ) -> Mapping[str, Any]: ...

    def close(self) -> None: ...


# ``open_target(settings, timeout)``: the program that registers the command decides where
# candidates run (embedded, or through the queue: a layer above this one).
OpenTarget = Callable[["Settings", float], CandidateTarget]


def repair(open_target: OpenTarget, *, run_id: str, model: str, max_attempts: int,
           execute: bool, args: Path | None, envelope: Path | None, out: Path | None,
           timeout: float, as_json: bool) -> None:
    from broker.envelope import load_envelope
    from broker.settings import Settings
    from orchestrator.inputs import MISSING, ArgsFile, resolve_inputs
    from orchestrator.models import Waiting, backend_from_spec
    from orchestrator.reconcile import sweep_revisions
    from orchestrator.repair import repair_dynamic_source

    settings = Settings()
    backend = Waiting(backend_from_spec(model, settings), err, rounds=max_attempts)
    given_args = ArgsFile(args) if args is not None else MISSING
    given_env = load_envelope(envelope) if envelope else None
    target = open_target(settings, timeout)
    try:
        # A revision whose runner died is failed first (as `revise run` does), so that a
        # crashed run can be repaired at once; a live one refuses the repair (RunBusy).
        sweep_revisions(target.store, settings.revision_lease_seconds, run_id=run_id)
        inputs = resolve_inputs(target.store, run_id, args=given_args, envelope=given_env)
        for note in inputs.notes():
            err.print(f"[yellow]note[/]: {render.escape(note)}")

        def run_candidate(text: str) -> Any:
            return target.run(run_id, text, inputs.args, inputs.envelope)

        result = repair_dynamic_source(store=target.store, run_id=run_id, model=backend,
                                       max_attempts=max_attempts, grants=inputs.envelope.grants,
                                       args=inputs.args, relocation=str(settings.relocation),
                                       execute=run_candidate if execute else None)
        if out is not None and result.candidate is not None:
            _write(out, result.candidate)
    finally:
        target.close()
        backend.close()
    if as_json:
        emit_json({**result.to_json(), "inputs": inputs.to_json(), "via": str(target.via)})
    else:
        _show_result(stdout, result, out, run_id)
    raise typer.Exit(REPAIR_EXIT[result.outcome])


def author_cmd(
    request: Annotated[str, typer.Argument(help="what the script should do")],
    model: ModelOpt,
    envelope: EnvelopeOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="write the script here when the checker accepts it (else to "
        "FILE.rejected)")] = None,
    max_attempts: Annotated[int, typer.Option("--max-attempts", min=1, max=20,
                                              help="feed violations back up to N-1 times")
                            ] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Have a model write a script for REQUEST and check it (prints violations if any).

    Exit codes: 0 the checker accepts the script; 1 it does not (with --out, the script
    goes to FILE.rejected, never to FILE); 2 bad input or configuration; 5 the model
    endpoint gave no usable answer after its retries.
    """
    from rich.syntax import Syntax

    from broker.envelope import Envelope, load_envelope
    from broker.settings import Settings
    from orchestrator.author import author_script
    from orchestrator.models import ModelEndpointError, Waiting, backend_from_spec

    backend = Waiting(backend_from_spec(model, Settings()), err, rounds=max_attempts)
    env = load_envelope(envelope) if envelope else Envelope()
    try:
        result = author_script(request, model=backend, envelope=env, max_attempts=max_attempts)
    except ModelEndpointError as exc:
        _endpoint_failed(exc, as_json)
    finally:
        backend.close()
    written = None
    if out is not None and result.script:
        written = out if result.valid else out.with_name(out.name + ".rejected")
        _write(written, result.script)
    if as_json:
        emit_json({**result.to_json(), "out": str(written) if written else None})
    else:
        console = stdout
        if out is None and result.script:
            console.print(Syntax(result.script, "python"))
        render.check_report(console, result.report)
        if written is not None and result.valid:
            console.print(f"wrote {written}")
        elif written is not None:
            console.print(f"[red]the checker rejected the script[/]: wrote it to {written}, "
                          f"not to {out}")
    raise typer.Exit(EXIT_OK if result.valid else EXIT_FAILED)


def _endpoint_failed(exc: ModelEndpointError, as_json: bool) -> NoReturn:
    if as_json:
        emit_json({"error": exc.to_json()})
    else:
        err.print(f"[bold red]error[/]: {render.escape(exc.message)}")
    raise typer.Exit(EXIT_MODEL_UNAVAILABLE)


def register(app: typer.Typer, *, open_target: OpenTarget) -> None:
    """`revise repair`, whose candidates run where ``open_target`` says, and `revise author`."""

    @app.command("repair", epilog=EXIT_CODES_HELP)
    @guard
    def repair_cmd(
        run_id: Annotated[str, typer.Option("--run-id", help="the failed run to repair")],
        model: ModelOpt,
        max_attempts: Annotated[int, typer.Option(
            "--max-attempts", "--max-rounds", min=1, max=20,
            help="rounds (model answers) at most, runtime refusals included")] = 3,
        execute: Annotated[bool, typer.Option(
            "--execute", help="run an accepted candidate on the same run id (replays the "
            "prefix); a runtime refusal goes back to the model")] = False,
        args: Annotated[Path | None, typer.Option(
            "--args", help="JSON file with the run's args (default: those stored with the "
            "run)")] = None,
        envelope: Annotated[Path | None, typer.Option(
            "--envelope", help="JSON/YAML envelope (default: the one stored with the run)")
                            ] = None,
        out: Annotated[Path | None, typer.Option(
            "--out", help="write the accepted candidate here")] = None,
        timeout: Annotated[float, typer.Option(
            "--timeout", help="seconds to wait for one candidate's run through the queue")
                           ] = 900.0,
        as_json: JsonFlag = False,
    ) -> None:
        """Ask a model to repair failed run R; the checker and the gate judge every candidate.

        The run's args and envelope are the ones stored with it unless --args/--envelope are
        given (a note says which). With --execute, an accepted candidate runs on R; when the
        runtime stops it (divergence, ledger denial, orphan stop, budget), that counterexample
        is the model's next round. On a deployment (REVISE_REPAIR_VIA=queue, or auto with a
        broker and a PostgreSQL run store) candidates are gated here and run by the workers.
        """
        repair(open_target, run_id=run_id, model=model, max_attempts=max_attempts,
               execute=execute, args=args, envelope=envelope, out=out, timeout=timeout,
               as_json=as_json)

    app.command("author")(guard(author_cmd))

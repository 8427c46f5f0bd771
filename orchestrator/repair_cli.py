"""`revise repair` and `revise author`, registered on the main app by ``register(app)``.

Shared helpers come from ``orchestrator.cli_common``; this module does not
import ``orchestrator.cli``, which registers it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.syntax import Syntax

from broker.envelope import Envelope, load_envelope
from broker.errors import InputError
from broker.settings import Settings
from orchestrator import render
from orchestrator.cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    JsonFlag,
    emit_json,
    guard,
    read_json,
)
from orchestrator.cli_common import (
    out as stdout,
)

ModelOpt = Annotated[str, typer.Option(
    "--model", help="recorded:PATH.jsonl, or a model name served by REVISE_MODEL_BASE_URL")]
EnvelopeOpt = Annotated[Path | None, typer.Option("--envelope", help="JSON/YAML envelope")]


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}; pass a writable --out") from None


def _close(backend: Any) -> None:
    close = getattr(backend, "close", None)
    if callable(close):
        close()


def _show_attempts(console: Console, result: Any) -> None:
    for attempt in result.attempts:
        if attempt.accepted:
            console.print(f"candidate {attempt.attempt}: [green]accepted[/] "
                          f"({attempt.calls} capability call(s))")
            continue
        console.print(f"candidate {attempt.attempt}: [red]refused[/] by "
                      f"{', '.join(attempt.refused_by)}")
        for ce in attempt.counterexamples:
            console.print(f"  gate {ce.kind}: {render.escape(ce.site)}")
        for v in attempt.violations:
            console.print(f"  {v.rule} line {v.line}: {render.escape(v.message)}")
        if "call_count" in attempt.refused_by:
            console.print(f"  call count {attempt.calls} < {attempt.required_calls}")


def repair_cmd(
    run_id: Annotated[str, typer.Option("--run-id", help="the failed run to repair")],
    model: ModelOpt,
    max_attempts: Annotated[int, typer.Option("--max-attempts", min=1, max=20,
                                              help="rewrites to ask for at most")] = 3,
    execute: Annotated[bool, typer.Option("--execute", help="run the accepted candidate on "
                                          "the same run id (replays the prefix)")] = False,
    args: Annotated[Path | None, typer.Option("--args", help="JSON file with the run's args")
                    ] = None,
    envelope: EnvelopeOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the accepted candidate "
                                             "here")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Ask a model to repair failed run R; the gate and checker judge every candidate."""
    from orchestrator.embedded import open_services
    from orchestrator.models import backend_from_spec
    from orchestrator.repair import repair_dynamic_source

    settings = Settings()
    backend = backend_from_spec(model, settings)
    run_args = read_json(args) if args is not None else None
    env = load_envelope(envelope) if envelope else Envelope()
    services = open_services(settings)
    try:
        result = repair_dynamic_source(store=services.store, run_id=run_id, model=backend,
                                       max_attempts=max_attempts, grants=env.grants,
                                       args=run_args, relocation=str(settings.relocation))
        if out is not None and result.candidate is not None:
            _write(out, result.candidate)
        report = None
        if execute and result.candidate is not None:
            report = services.pipeline().run(run_id, result.candidate,
                                             run_args if run_args is not None else {},
                                             env).to_json()
    finally:
        services.close()
        _close(backend)
    ok = result.accepted and (report is None or report["status"] == "succeeded")
    if as_json:
        emit_json({**result.to_json(), "run": report})
    else:
        console = stdout
        _show_attempts(console, result)
        if result.candidate is None:
            console.print(f"[red]no admissible candidate[/] in {result.rewrites} rewrite(s); "
                          "nothing was executed")
        elif report is not None:
            render.run_report(console, report)
        elif out is None:
            console.print(Syntax(result.candidate, "python"))
            console.print(f"run it with: revise run CANDIDATE.py --run-id {run_id} (or "
                          "pass --execute)")
    raise typer.Exit(EXIT_OK if ok else EXIT_FAILED)


def author_cmd(
    request: Annotated[str, typer.Argument(help="what the script should do")],
    model: ModelOpt,
    envelope: EnvelopeOpt = None,
    out: Annotated[Path | None, typer.Option("--out", help="write the script here")] = None,
    max_attempts: Annotated[int, typer.Option("--max-attempts", min=1, max=20,
                                              help="feed violations back up to N-1 times")
                            ] = 1,
    as_json: JsonFlag = False,
) -> None:
    """Have a model write a script for REQUEST and check it (prints violations if any)."""
    from orchestrator.author import author_script
    from orchestrator.models import backend_from_spec

    backend = backend_from_spec(model, Settings())
    env = load_envelope(envelope) if envelope else Envelope()
    try:
        result = author_script(request, model=backend, envelope=env, max_attempts=max_attempts)
    finally:
        _close(backend)
    if out is not None and result.script:
        _write(out, result.script)
    if as_json:
        emit_json({**result.to_json(), "out": str(out) if out else None})
    else:
        console = stdout
        if out is None and result.script:
            console.print(Syntax(result.script, "python"))
        render.check_report(console, result.report)
        if out is not None:
            console.print(f"wrote {out}")
    raise typer.Exit(EXIT_OK if result.valid else EXIT_FAILED)


def register(app: typer.Typer) -> None:
    app.command("repair")(guard(repair_cmd))
    app.command("author")(guard(author_cmd))

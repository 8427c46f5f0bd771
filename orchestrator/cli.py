"""The host's commands of ``revise`` (JSON with --json, tables otherwise).

``workers.cli`` is the program: it adds the commands that need the queue or every
layer's settings (``submit``, ``config``, ``repair`` through the workers).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from broker.errors import InputError
from broker.syntax import parse_python
from orchestrator import render
from orchestrator.artifact_cli import register as register_artifact
from orchestrator.cli_common import (
    EXIT_FAILED,
    EXIT_OK,
    JsonFlag,
    RunId,
    emit,
    emit_json,
    err,
    guard,
    out,
    read_bounded,
    read_result,
    read_script,
    write_to,
)

# Plain help (rich_markup_mode=None): rendering it with rich took longer than the rest of
# `revise --help`.
app = typer.Typer(
    help="Revise: run model-written orchestration scripts and repair them without paying "
    "twice.", rich_markup_mode=None, no_args_is_help=True, pretty_exceptions_enable=False,
    add_completion=False)
sandbox_app = typer.Typer(
    rich_markup_mode=None, help="Sandbox image management.", no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")
db_app = typer.Typer(
    rich_markup_mode=None, help="The run store's database.", no_args_is_help=True)
app.add_typer(db_app, name="db")

# pydantic (settings, envelopes) and the checker load inside the commands that use them:
# `revise --help` imports this module and should answer at once.


def _settings() -> Any:
    from broker.settings import Settings

    return Settings()


def _services(*, read_only: bool = False):
    from orchestrator.embedded import open_services

    return open_services(_settings(), read_only=read_only)


def _read_only_services():
    """The services for a command that lists; None when the store has no schema at all
    (nothing has run with it: the list is empty). An older schema is the error."""
    from broker.errors import SchemaNotReady

    try:
        return _services(read_only=True)
    except SchemaNotReady as exc:
        if exc.schema is not None:
            raise
        return None


@app.command("check")
@guard
def check_cmd(script: Path, as_json: JsonFlag = False) -> None:
    """Run the static checker (R00-R12) on SCRIPT; exit 0 when valid."""
    from orchestrator.checker import check
    from orchestrator.refusals import check_failed
    from orchestrator.source import decode_source

    report = check(decode_source(read_script(script)).text)
    refusal = None if report.valid else check_failed(report.violations).to_json()
    emit(as_json, {**report.to_json(), "error": refusal},
         lambda c: render.check_report(c, report))
    raise typer.Exit(EXIT_OK if report.valid else EXIT_FAILED)


@app.command("sites")
@guard
def sites_cmd(script: Path, as_json: JsonFlag = False) -> None:
    """List the structural callsites of SCRIPT with capability and fingerprint."""
    from orchestrator.sites import assign_sites
    from orchestrator.source import decode_source

    source = decode_source(read_script(script))
    try:
        tree = parse_python(source.text)
    except SyntaxError as exc:
        raise InputError(f"{script}: syntax error at line {exc.lineno}: {exc.msg}") from None
    sites = assign_sites(tree)
    data = {"sites": [{"site": s.site, "capability": s.capability, "line": s.line,
                       "fingerprint": s.fingerprint} for s in sites]}
    emit(as_json, data, lambda c: render.sites(c, sites))


@app.command("gate")
@guard
def gate_cmd(script: Path, run_id: RunId, as_json: JsonFlag = False) -> None:
    """Check SCRIPT against the frozen prefix of run R (starts nothing)."""
    from orchestrator.gate import check_gate, frozen_sites
    from orchestrator.refusals import gate_rejected
    from orchestrator.sites import assign_sites
    from orchestrator.source import decode_source

    source = decode_source(read_script(script))
    try:
        tree = parse_python(source.text)
    except SyntaxError as exc:
        raise InputError(f"{script}: syntax error at line {exc.lineno}: {exc.msg}") from None
    services = _services(read_only=True)
    try:
        slots = services.store.list_slots(run_id)
        result = check_gate(frozen_sites(slots),
                            assign_sites(tree), relocation=str(services.settings.relocation))
        if services.store.get_run(run_id) is None:  # a typo'd id would pass every script
            err.print(f"[yellow]note[/]: run {render.escape(repr(run_id))} is not in this "
                      "run store (REVISE_DATABASE_URL): nothing is committed there, so "
                      "every script passes its gate")
    finally:
        services.close()
    refusal = None if result.accepted else gate_rejected(result.counterexamples).to_json()
    emit(as_json, {**result.to_json(), "error": refusal}, lambda c: render.gate(c, result))
    raise typer.Exit(EXIT_OK if result.accepted else EXIT_FAILED)


@app.command("run")
@guard
def run_cmd(
    script: Path, run_id: RunId,
    args: Annotated[Path | None, typer.Option("--args", help="JSON file with the args")] = None,
    envelope: Annotated[Path | None, typer.Option("--envelope", help="JSON/YAML envelope")
                        ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run SCRIPT as run R: the first run, or a repair candidate replayed on R's prefix.

    On an existing run, the args and envelope stored with its latest revision are reused
    unless --args / --envelope are given (a note on stderr says which, and when new ones
    differ from the stored ones).
    """
    from broker.envelope import load_envelope
    from orchestrator.inputs import MISSING, ArgsFile, resolve_inputs

    source = read_script(script)
    given_args = ArgsFile(args) if args is not None else MISSING
    given_env = load_envelope(envelope) if envelope else None
    services = _services()
    try:
        inputs = resolve_inputs(services.store, run_id, args=given_args, envelope=given_env)
        for note in inputs.notes():
            err.print(f"[yellow]note[/]: {render.escape(note)}")
        report = services.pipeline().run(run_id, source, inputs.args,
                                         inputs.envelope).to_json()
    finally:
        services.close()
    emit(as_json, report, lambda c: render.run_report(c, report))
    raise typer.Exit(EXIT_OK if report["status"] == "succeeded" else EXIT_FAILED)


@app.command("runs")
@guard
def runs_cmd(
    limit: Annotated[int, typer.Option("--limit", help="most runs to list")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first."""
    if limit < 0:
        raise InputError(f"--limit {limit}: give the most runs to list, 0 or more",
                         field="--limit", value=str(limit))
    services = _read_only_services()
    if services is None:
        runs = []  # nothing has run with this store yet
    else:
        try:
            runs = services.store.list_runs(limit)
        finally:
            services.close()
    data = {"runs": [{"run_id": r.run_id, "status": str(r.status), "revisions": r.revisions,
                      "updated_at": r.updated_at.isoformat(), "detail": r.detail}
                     for r in runs]}
    emit(as_json, data, lambda c: render.runs(c, runs))


@app.command("show")
@guard
def show_cmd(run_id: str, as_json: JsonFlag = False) -> None:
    """Show a run: revisions, committed identities, attempts, spend and events."""
    from orchestrator.inspect import describe_run

    services = _services(read_only=True)
    try:
        data = describe_run(services.store, run_id, artifacts_in=services.artifacts.where)
    finally:
        services.close()
    emit(as_json, data, lambda c: render.show(c, data))


@app.command("report")
@guard
def report_cmd(
    run_id: str,
    html: Annotated[Path | None, typer.Option("--html", help="write the run report as one "
                                              "self-contained HTML page to FILE")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Run R's report: revisions side by side, counterexamples, open attempts, spend against
    a full rerun and the certificate check (`revise show R` is the terminal view)."""
    from orchestrator.html_report import render_html
    from orchestrator.inspect import embed_images, report_view

    services = _services(read_only=True)
    try:
        view = report_view(services.store, run_id)
        if html is not None:
            embed_images(view, services.artifacts)
    finally:
        services.close()
    if html is not None:
        write_to(html, "--html FILE", html.write_text, render_html(view), "utf-8",
                 what="the report to ")
    emit(as_json, view, lambda c: c.print(f"wrote {html}") if html is not None
         else render.show(c, view))


@app.command("certificate")
@guard
def certificate_cmd(run_id: str, as_json: JsonFlag = False) -> None:
    """Recompute run R's certificate from the store and list differences."""
    from orchestrator.certificate import verify

    services = _services(read_only=True)
    try:
        persisted = services.store.latest_certificate(run_id)
        if persisted is None:
            raise _no_certificate(services.store, run_id)
        cert = verify(persisted.digest, persisted.entries, services.store.list_slots(run_id))
        certified = next((r for r in services.store.list_revisions(run_id)
                          if r.revision == persisted.revision), None)
    finally:
        services.close()
    from orchestrator.inspect import relocations_of

    data = {"run_id": run_id, "revision": persisted.revision,
            "persisted_digest": persisted.digest, **cert.to_json(),
            "relocations": relocations_of(certified.summary if certified else None)}
    emit(as_json, data, lambda c: render.certificate(c, data))
    raise typer.Exit(EXIT_OK if not cert.differences else EXIT_FAILED)


def _no_certificate(store: Any, run_id: str) -> Exception:
    from broker.records import RevisionStatus

    _require_run(store, run_id)
    revisions = store.list_revisions(run_id)
    running = [r.revision for r in revisions if r.status is RevisionStatus.RUNNING]
    if running:
        return InputError(f"run {run_id!r} has no certificate yet: its revision "
                          f"{running[-1]} is still running")
    return InputError(f"run {run_id!r} has no certificate: none of its revisions ran "
                      "(each was refused before anything was spent; `revise show "
                      f"{run_id}` says why)")


def _require_run(store: Any, run_id: str) -> None:
    """A command about one run answers a run that does not exist as `revise show` does."""
    from orchestrator.inspect import run_not_found

    if store is None or store.get_run(run_id) is None:
        raise run_not_found(run_id)


@app.command("orphans")
@guard
def orphans_cmd(run_id: str, as_json: JsonFlag = False) -> None:
    """Committed identities that a later revision did not invoke."""
    services = _services(read_only=True)
    try:
        _require_run(services.store, run_id)
        orphans = services.store.list_orphans(run_id)
    finally:
        services.close()
    emit(as_json, {"run_id": run_id, "orphans": orphans},
          lambda c: render.orphans(c, run_id, orphans))


@app.command("attempts")
@guard
def attempts_cmd(
    unresolved: Annotated[bool, typer.Option("--unresolved", help="only attempts that need "
                                             "an operator")] = False,
    run_id: Annotated[str | None, typer.Option("--run-id")] = None,
    as_json: JsonFlag = False,
) -> None:
    """List provider attempts (written before dispatch), with when each request was sent
    and when its answer was recorded; --unresolved: those an operator may have to decide
    (pending, unresolved, uncertain: possibly charged)."""
    from broker.records import AttemptStatus

    statuses = frozenset({AttemptStatus.UNRESOLVED, AttemptStatus.PENDING,
                          AttemptStatus.UNCERTAIN}) if unresolved else None
    services = _read_only_services()
    store = services.store if services is not None else None  # None: nothing ran yet
    try:
        if run_id is not None:
            _require_run(store, run_id)
        attempts = store.list_attempts(run_id, statuses) if store is not None else []
    finally:
        if services is not None:
            services.close()
    data = {"attempts": [render.attempt_json(a) for a in attempts]}
    emit(as_json, data, lambda c: render.attempts(c, attempts))


@app.command("reconcile")
@guard
def reconcile_cmd(
    run_id: str,
    identity: Annotated[str, typer.Argument(help="SITE@PATH:OCCURRENCE, as `revise show` "
                                            "prints it")],
    abandon: Annotated[bool, typer.Option("--abandon", help="let the identity execute once "
                                          "more (may repeat an effect the provider did)")
                       ] = False,
    result: Annotated[Path | None, typer.Option("--result", help="JSON file with the known "
                                                "result to commit")] = None,
    artifact: Annotated[list[Path] | None, typer.Option(
        "--artifact", help="a file the result references (its SHA-256 is the artifact id), "
        "imported into the artifact store with the result; repeatable")] = None,
    from_log: Annotated[Path | None, typer.Option(
        "--from-log", help="a provider log (provider-log.jsonl): commit the result its ok "
        "line for this run, identity and payload digest records")] = None,
    from_provider: Annotated[bool, typer.Option(
        "--from-provider", help="ask the provider what it did for the attempt's "
        "idempotency key (REVISE_PROVIDER_LOOKUP_PATH): commit the result it kept, or "
        "abandon the attempt if it has no record")] = False,
    operator: Annotated[str, typer.Option("--operator", help="who decides (recorded)")] = "",
    reason: Annotated[str, typer.Option("--reason", help="why (recorded)")] = "",
    as_json: JsonFlag = False,
) -> None:
    """Resolve an unresolved attempt: write back its known result, or abandon it.

    A result (from --result FILE or a provider log's ok line with --from-log FILE) must
    have the capability's result shape, and every artifact it references must be in the
    artifact store or given with --artifact FILE."""
    from broker.identity import Identity
    from orchestrator.reconcile import ask_provider, reconcile_attempt, result_from_log
    from orchestrator.reconcile_input import Imported

    if [abandon, result is not None, from_log is not None, from_provider].count(True) != 1:
        raise InputError("pass exactly one of --abandon, --result FILE, --from-log FILE or "
                         "--from-provider")
    if artifact and abandon:
        raise InputError("--artifact FILE goes with --result FILE or --from-log FILE")
    kwargs: dict[str, Any] = {}
    if result is not None:
        kwargs["result"] = read_result(result)
    if not abandon:
        kwargs["imports"] = [Imported(str(path), _read_artifact(path)) for path in artifact or []]
    services = _services()
    try:
        if from_log is not None:
            kwargs["result"] = result_from_log(services.store, from_log, run_id, identity)
        if from_provider:
            found = ask_provider(services.store, services.provider, run_id, identity)
            if found.state == "in_progress":
                raise InputError(f"the provider is still working on the request at "
                                 f"{identity}; ask again later")
            if found.state == "completed" and found.answer is not None:
                kwargs["result"] = found.answer.result
        data = reconcile_attempt(services.store, run_id, Identity.parse(identity),
                                 operator=operator, reason=reason,
                                 artifacts=services.artifacts, **kwargs)
    finally:
        services.close()
    def human(c: Any) -> None:
        c.print(f"{data['decision']} attempt #{data['attempt_number']} at {data['identity']}; "
                f"{data['open_attempts_left']} open attempt(s) left in {run_id}")
        if data.get("warning"):
            c.print(f"[yellow]warning:[/] {render.escape(data['warning'])}")

    emit(as_json, data, human)


def _read_artifact(path: Path) -> bytes:
    limit = _settings().artifact_max_bytes
    return read_bounded(path, "artifact", limit, "raise REVISE_ARTIFACT_MAX_BYTES (every "
                        "process of the deployment must see the same value) to import it")


@app.command("demo")
@guard
def demo_cmd(as_json: JsonFlag = False) -> None:
    """The four-shot story: fail, a repair the gate stops, a repair it relocates, replay."""
    from orchestrator.demo.run import run_demo

    services = _services()
    try:
        summary = run_demo(services, out if not as_json else None)
    finally:
        services.close()
    if as_json:
        emit_json(summary)
    raise typer.Exit(EXIT_OK if summary["ok"] else EXIT_FAILED)


@sandbox_app.command("build")
@guard
def sandbox_build_cmd(as_json: JsonFlag = False) -> None:
    """Build (or confirm) the sandbox image; fast when it is current."""
    from sandbox.image import ensure_image

    def progress(line: str) -> None:  # build output is not markup
        err.print(line, markup=False, highlight=False)

    info = ensure_image(_settings(), progress=None if as_json else progress)
    emit(as_json, {"tag": info.tag, "image_id": info.image_id},
          lambda c: c.print(f"sandbox image {info.tag} = {info.image_id}"))


@db_app.command("upgrade")
@guard
def db_upgrade_cmd(as_json: JsonFlag = False) -> None:
    """Create REVISE_DATABASE_URL's database if it is missing (when the role may), then
    migrate it to the current schema. Safe to run again, and from several hosts."""
    from broker.database import prepare_database

    prepared = prepare_database(_settings().resolved_database_url)
    emit(as_json, prepared.to_json(), lambda c: c.print(
        f"{'created' if prepared.created else 'found'} {prepared.database}; schema at "
        f"{prepared.revision}"))


register_artifact(app)

"""``revise config [--check] [--json]``: the effective settings of this environment.

Every field of the run settings (``broker.settings.Settings``), the queue's and Flower's
(``workers.config``) and the process sandbox's
(``sandbox.process_profile.ProcessSettings``), with its value and where it came from
(``env`` or ``default``). Secrets are masked: SecretStr fields and the password inside a
URL. ``--check`` prints one ``error:`` line per problem (a value a setting refuses, such
as a database URL that cannot be parsed; settings a role would refuse or start degraded
with, such as an HTTP provider without its URL or key, a REVISE_HOME that cannot be
written, an S3 artifact store without its bucket or Flower published without
authentication; a ``REVISE_*`` variable nothing reads, with the nearest real name) and
exits 2 when there is one. It never connects to the database, Redis or a sandbox (it
only tries making a file in REVISE_HOME, and removes it): it is what to run first when
one of them is not found. Piped, the settings are plain lines
(``VARIABLE<tab>value<tab>source``), never cut to a terminal's width.

Registered on the main app by ``register(app)``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from orchestrator import render
from orchestrator.cli_common import EXIT_OK, EXIT_USAGE, JsonFlag, emit, emit_json, err, guard

if TYPE_CHECKING:
    from pydantic_settings import BaseSettings
    from rich.console import Console

CheckFlag = Annotated[bool, typer.Option(
    "--check", help="print one line per problem and exit 2 when there is one")]


def _classes() -> list[type[BaseSettings]]:
    from broker.settings import Settings
    from sandbox.process_profile import ProcessSettings
    from workers.config import FlowerSettings, WorkerSettings

    return [Settings, WorkerSettings, ProcessSettings, FlowerSettings]


def _shown(value: Any) -> Any:
    """A JSON value for a field, secrets masked."""
    from pydantic import SecretStr

    from broker.settings import mask_url

    if isinstance(value, SecretStr):
        return "***" if value.get_secret_value() else ""
    if isinstance(value, str) and "://" in value:
        return mask_url(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    return str(value)


def _effective(instance: Any, field: str) -> Any:
    """The value a setting has, an unset one that follows another included (an unset
    REVISE_DATABASE_URL is the SQLite file under HOME, an unset broker URL is REVISE_REDIS_URL):
    its ``resolved_`` property."""
    value = getattr(instance, field)
    if value is not None:
        return value
    for name in (f"resolved_{field}", f"resolved_{field.removeprefix('celery_')}"):
        if hasattr(type(instance), name):
            return getattr(instance, name)
    return None


def effective_settings() -> tuple[list[dict[str, Any]], list[str]]:
    """(one row per field of every settings class, the problems found), reading only the
    environment."""
    from broker.errors import ConfigError
    from broker.settings import env_names
    from workers.variables import unknown_variables

    environ = {name.upper() for name in os.environ}
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    instances: dict[str, Any] = {}
    for cls in _classes():
        try:
            instance: Any = cls()
        except ConfigError as exc:  # every layer's settings raise one SettingsError
            problems += getattr(exc, "problems", None) or [exc.message]
            instance = None
        instances[cls.__name__] = instance
        for field, variable in zip(cls.model_fields, env_names(cls), strict=True):
            value = _effective(instance, field) if instance is not None else "(invalid)"
            rows.append({"variable": variable, "value": _shown(value),
                         "source": "env" if variable in environ else "default"})
    problems += _role_problems(instances)
    problems += [unknown.line() for unknown in unknown_variables(os.environ)]
    return rows, problems


def _role_problems(instances: dict[str, Any]) -> list[str]:
    """What a role would refuse to start with, or start degraded with, that the settings
    alone show (no connection): each line names the role."""
    from broker.artifact_stores import artifact_store_problem
    from broker.settings import (
        home_problem,
        model_url_problem,
        provider_ignored,
        provider_key_problem,
        provider_problem,
    )

    found = []
    if instances.get("Settings") is not None:
        problem = home_problem(instances["Settings"])
        if problem:
            found.append(f"every role would refuse to start: {problem}")
        problem = (provider_problem(instances["Settings"])
                   or provider_key_problem(instances["Settings"]))
        if problem:
            found.append(f"broker workers would refuse to start: {problem}")
        problem = provider_ignored(instances["Settings"])
        if problem:
            found.append(f"no provider would be called: {problem}")
        problem = artifact_store_problem(instances["Settings"])
        if problem:
            found.append(f"every role would fail to keep or read an artifact: {problem}")
        problem = model_url_problem(instances["Settings"].model_base_url)
        if problem:
            found.append(f"revise repair would refuse to ask the model: {problem}")
    if instances.get("FlowerSettings") is not None:
        problem = instances["FlowerSettings"].unauthenticated_problem()
        if problem:
            found.append(f"flower would refuse to start: {problem}")
    return found


def _table(c: Console, rows: list[dict[str, Any]], problems: list[str]) -> None:
    if c.is_terminal:
        _boxed(c, rows)
    else:  # piped (`revise config | grep URL`): one whole line per setting, never folded
        for row in rows:
            value = "" if row["value"] is None else str(row["value"])
            c.file.write(f"{row['variable']}\t{value}\t{row['source']}\n")
    for problem in problems:
        err.print(f"[yellow]warning[/]: {render.escape(problem)}")


def _boxed(c: Console, rows: list[dict[str, Any]]) -> None:
    table = render.Table()
    table.add_column("variable", no_wrap=True)  # the name an operator copies: never cut
    table.add_column("value", overflow="fold")
    table.add_column("from", no_wrap=True)
    for row in rows:
        value = "" if row["value"] is None else str(row["value"])
        table.add_row(row["variable"], render.escape(value),
                      "[bold]env[/]" if row["source"] == "env" else "default")
    c.print(table)


def register(app: typer.Typer) -> None:
    @app.command("config")
    @guard
    def config_cmd(check: CheckFlag = False, as_json: JsonFlag = False) -> None:
        """Print the effective settings (secrets masked) and where each came from; with
        --check, one line per problem and exit 2 when there is one. Connects to nothing."""
        # The settings log unknown variables once per process; here they are the output.
        logging.getLogger("revise.settings").disabled = True
        rows, problems = effective_settings()
        if check:
            if as_json:
                emit_json({"ok": not problems, "problems": problems})
            else:
                for problem in problems:
                    err.print(f"[bold red]error[/]: {render.escape(problem)}")
                if not problems:
                    out_line = f"ok: {len(rows)} settings, no problems"
                    emit(False, None, lambda c: c.print(out_line))
            raise typer.Exit(EXIT_USAGE if problems else EXIT_OK)
        emit(as_json, {"settings": rows, "problems": problems},
             lambda c: _table(c, rows, problems))

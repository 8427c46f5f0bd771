"""What every `revise` command module shares: exit codes, JSON output, error handling.

Kept apart from ``orchestrator.cli`` so command modules registered on the app
(repair, submit) can use it without importing the app module in a cycle.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from broker.errors import ConfigError, InputError, ReviseError
from broker.names import validate_name
from broker.outage import is_queue_outage, queue_unavailable
from orchestrator import render

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_FAILED = 1  # the run, check or gate said no
EXIT_USAGE = 2  # bad input: a file, an option, a setting
EXIT_UNKNOWN = 3  # could not tell yet: `revise submit` gave up (--wait's timeout passed
#                  and the job keeps running, or the store or Redis did not answer long enough)
# `revise repair` / `revise author`: why no repaired run came out of the model.
EXIT_CANDIDATE_FAILED = EXIT_FAILED  # a candidate was admitted, ran, and did not succeed
EXIT_NO_CANDIDATE = 4  # every round's candidate was refused before anything ran
EXIT_MODEL_UNAVAILABLE = 5  # the model endpoint gave no usable answer after its retries

JsonFlag = Annotated[bool, typer.Option("--json", help="print one JSON object on stdout")]
RunId = Annotated[str, typer.Option("--run-id", help="the run to create or repair (a name "
                                    "such as shots-2024.1: letters, digits, '.', '_', '-')")]

# Command parameters that hold a name which becomes a path or a queue key. ``guard``
# validates them before the command runs, so every command that takes one (an option
# or an argument, today or added later) refuses a bad name the same way.
NAME_PARAMETERS = {"run_id": "run id", "job_id": "job id"}

class _Console:
    """A rich Console made on first use (``revise --help`` never loads rich)."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


# Lines are not hard-wrapped (tables still fit the width): a path in a message must stay
# one piece to copy.
out: Console = _Console(soft_wrap=True)  # type: ignore[assignment]
err: Console = _Console(stderr=True, soft_wrap=True)  # type: ignore[assignment]


def emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def emit(as_json: bool, data: Any, human: Callable[[Console], None]) -> None:
    if as_json:
        emit_json(data)
    else:
        human(out)


def guard(fn: Callable[..., None]) -> Callable[..., None]:
    """Every ReviseError becomes a message naming the fix and an exit code, never a traceback.

    Names in ``NAME_PARAMETERS`` are validated first (a bad one is a usage error, exit 2).
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        try:
            for parameter, kind in NAME_PARAMETERS.items():
                if kwargs.get(parameter) is not None:
                    validate_name(kind, kwargs[parameter])
            try:
                fn(*args, **kwargs)
            except Exception as exc:  # Redis down under Celery: name it, no traceback
                if not is_queue_outage(exc):
                    raise
                from broker.settings import Settings

                raise queue_unavailable(Settings().resolved_broker_url, "talking to the "
                                        "queue", exc) from None
        except ReviseError as exc:
            code = EXIT_USAGE if isinstance(exc, InputError | ConfigError) else EXIT_FAILED
            if kwargs.get("as_json"):
                emit_json({"error": exc.to_json()})
            else:
                err.print(f"[bold red]error[/]: {render.escape(exc.message)}")
            raise typer.Exit(code) from None
    return wrapper


def read_bounded(path: Path, what: str, limit: int, fix: str) -> bytes:
    """The bytes of ``path``, its size checked before a byte is read (a pipe has no size:
    one byte past ``limit`` is read); a file over ``limit`` is one error naming it, the
    limit and ``fix``."""
    import stat

    try:
        info = path.stat()
        size = info.st_size if stat.S_ISREG(info.st_mode) else None
        if size is None or size <= limit:
            with path.open("rb") as handle:
                data = handle.read(limit + 1)
            if len(data) <= limit:
                return data
    except OSError as exc:
        raise InputError(f"cannot read {what} file {path}: {exc.strerror}; pass an existing "
                         "file", file=str(path)) from None
    shown = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    raise InputError(f"{what} file {path} is {shown}, over the limit of {limit} bytes; {fix}",
                     file=str(path), limit=limit)


def write_to(path: Path, option: str, write: Callable[..., object], *args: Any,
             what: str = "") -> None:
    """``write(*args)``, a write to ``path`` that ``option`` named; its OSError (a
    directory, a missing folder, a full disk) is one error naming the file and the fix.
    ``what``: what is written, as the message says it ("the report to ")."""
    try:
        write(*args)
    except OSError as exc:
        raise InputError(f"cannot write {what}{path}: {exc.strerror}; pass a writable "
                         f"{option}", file=str(path)) from None


# A result an operator writes back (`revise reconcile --result`): a provider answer's JSON,
# which points at its artifacts rather than holding their bytes.
MAX_RESULT_FILE_BYTES = 8 << 20
RESULT_EXAMPLE = ('write the call\'s known result as JSON in its capability\'s result shape, '
                  'e.g. for image.generate {"artifact": {"id": "sha256:<hex>", "media_type": '
                  '"image/png", "bytes": 1234}, "width": 1024, "height": 1024} (`revise show '
                  'R` lists committed results)')


def read_result(path: Path) -> Any:
    """The JSON of a ``--result`` file: bounded before parsing, one error naming the fix."""
    from orchestrator.inputs import parse_json_file

    data = read_bounded(path, "result", MAX_RESULT_FILE_BYTES,
                        "a result names its artifacts (--artifact FILE), it does not hold them")
    return parse_json_file(data, f"result file {path}", path, RESULT_EXAMPLE)


def read_script(path: Path) -> bytes:
    from orchestrator.source import MAX_SOURCE_BYTES

    return read_bounded(path, "script", MAX_SOURCE_BYTES, "that is the checker's limit "
                        "(rule R00, not a setting): move data into --args instead of literals")

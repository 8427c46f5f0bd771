"""``revise artifact get ID -o FILE``: an artifact's bytes from the store the settings name.

Registered on the main app by ``register(app)``. The store is the one broker
workers write to (``REVISE_ARTIFACT_STORE``: file, database or s3), so any
machine with the deployment's settings can fetch what any worker produced.
The bytes are streamed into a temporary file next to FILE and renamed over it
only once their hash matched the id: a damaged copy never lands at FILE.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from broker.errors import InputError
from orchestrator.cli_common import JsonFlag, emit, guard, write_to

if TYPE_CHECKING:
    from broker.settings import Settings

artifact_app = typer.Typer(help="Artifacts (images and other bytes calls produced).",
                           rich_markup_mode=None, no_args_is_help=True)


def fetch_to(settings: Settings, artifact: str, target: Path) -> dict[str, object]:
    """Stream ``artifact`` into ``target``; returns what was written and from where."""
    from broker.artifact_stores import open_artifact_store
    from broker.artifacts import id_of
    from broker.sqlstore import SqlStore

    artifact = id_of(artifact.strip())
    store = SqlStore.open(settings.resolved_database_url) \
        if settings.resolved_artifact_store == "database" else None
    try:
        artifacts = open_artifact_store(settings, store.engine if store else None)
        chunks = artifacts.stream(artifact)  # a missing artifact fails before any file
        parent = target.parent if str(target.parent) else Path(".")
        try:
            fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{target.name}.")
        except OSError as exc:
            raise InputError(f"cannot write into {parent}: {exc.strerror}; pass a writable "
                             "-o FILE") from None
        size = 0
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in chunks:
                    write_to(target, "-o FILE", handle.write, chunk)
                    size += len(chunk)
            write_to(target, "-o FILE", os.replace, tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
    finally:
        if store is not None:
            store.close()
    return {"artifact": artifact, "bytes": size, "out": str(target), "store": artifacts.where}


@artifact_app.command("get")
@guard
def get_cmd(
    artifact: Annotated[str, typer.Argument(help="sha256:<64 hex> or artifact://sha256:<hex>, "
                                            "as `revise show` prints it")],
    out: Annotated[Path, typer.Option("-o", "--out", help="file to write the bytes to")],
    as_json: JsonFlag = False,
) -> None:
    """Write artifact ID's bytes to FILE (from the store the settings name)."""
    from broker.settings import Settings

    data = fetch_to(Settings(), artifact, out)
    emit(as_json, data, lambda c: c.print(
        f"wrote {data['bytes']} bytes of {data['artifact']} to {data['out']} "
        f"(from {data['store']})"))


def register(app: typer.Typer) -> None:
    app.add_typer(artifact_app, name="artifact")

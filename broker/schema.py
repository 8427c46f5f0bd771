"""The run store's schema version, read without Alembic, and which database it is.

A process whose store is at head, which is every start but the first after an upgrade,
never imports Alembic (with Mako and pygments: 11 MB and about 0.1 s of CPU in each
process). ``SCHEMA_HEAD`` is the head of ``broker/migrations``; a test holds the two
equal, so a new migration cannot be forgotten here.
"""

from __future__ import annotations

import socket
from functools import cache
from pathlib import Path

from sqlalchemy import Engine, inspect, text
from sqlalchemy.exc import DBAPIError

SCHEMA_HEAD = "0007"

_VERSIONS = Path(__file__).resolve().parent / "migrations" / "versions"


@cache
def known_revisions() -> frozenset[str]:
    """Every schema revision this code's migrations know (their file names' prefix): a
    store at any other revision was migrated by a newer Revise and cannot be moved back."""
    return frozenset(path.name.split("_", 1)[0] for path in _VERSIONS.glob("[0-9]*_*.py"))


def store_mark(engine: Engine) -> str | None:
    """Which database this is, the same from every host whatever address reaches it:
    PostgreSQL's cluster identifier and the database's name, a SQLite file's host and
    path; None when the database does not say (a role denied ``pg_control_system``)."""
    if engine.dialect.name != "postgresql":
        return f"{engine.dialect.name}:{socket.gethostname()}:{engine.url.database}"
    with engine.connect() as conn:
        try:
            return conn.execute(text(
                "SELECT 'postgresql:' || (SELECT system_identifier FROM pg_control_system())"
                " || ':' || current_database()")).scalar()
        except DBAPIError:
            return None


def stored_revision(engine: Engine) -> str | None:
    """The database's schema revision (None: no schema yet). Reads, never writes."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

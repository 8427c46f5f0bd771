"""The run store's schema version, read without Alembic.

A process whose store is at head, which is every start but the first after an upgrade,
never imports Alembic (with Mako and pygments: 11 MB and about 0.1 s of CPU in each
process). ``SCHEMA_HEAD`` is the head of ``broker/migrations``; a test holds the two
equal, so a new migration cannot be forgotten here.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from sqlalchemy import Engine, inspect, text

SCHEMA_HEAD = "0007"

_VERSIONS = Path(__file__).resolve().parent / "migrations" / "versions"


@cache
def known_revisions() -> frozenset[str]:
    """Every schema revision this code's migrations know (their file names' prefix): a
    store at any other revision was migrated by a newer Revise and cannot be moved back."""
    return frozenset(path.name.split("_", 1)[0] for path in _VERSIONS.glob("[0-9]*_*.py"))


def stored_revision(engine: Engine) -> str | None:
    """The database's schema revision (None: no schema yet). Reads, never writes."""
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()

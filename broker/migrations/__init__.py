"""Alembic migrations for the run store, configured in code (no alembic.ini).

``upgrade`` is safe when several processes open the same database at once:
the whole upgrade runs in one transaction that first takes a lock (a
PostgreSQL advisory lock; SQLite's write lock via BEGIN IMMEDIATE), so the
second process waits and then finds the schema already at head.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine

__all__ = ["MIGRATIONS_DIR", "alembic_config", "head_revision", "upgrade"]

MIGRATIONS_DIR = Path(__file__).resolve().parent

# Arbitrary but fixed: pg_advisory_xact_lock key for "revise schema upgrade".
_PG_LOCK_KEY = 0x5245564953450001


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        # ConfigParser interpolation treats % specially (percent-encoded passwords).
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(engine_or_url: Engine | str, revision: str = "head") -> None:
    """Bring the schema to ``revision`` (head by default)."""
    owned = isinstance(engine_or_url, str)
    engine = create_engine(engine_or_url) if isinstance(engine_or_url, str) else engine_or_url
    try:
        # "revise_write" makes the SQLite begin hook emit BEGIN IMMEDIATE (see sqlstore).
        with engine.connect() as conn:
            conn.execution_options(revise_write=True)
            with conn.begin():
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_PG_LOCK_KEY})")
                config = alembic_config()
                config.attributes["connection"] = conn
                command.upgrade(config, revision)
    finally:
        if owned:
            engine.dispose()


def head_revision() -> str:
    """The schema revision this code needs."""
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "the migrations directory has no head"
    return head

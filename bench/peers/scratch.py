"""A throwaway PostgreSQL database for one bench run (created, then dropped)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/test"  # where scratch databases are made


@contextlib.contextmanager
def scratch_database(admin_url: str, prefix: str = "revise_bench") -> Iterator[str]:
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

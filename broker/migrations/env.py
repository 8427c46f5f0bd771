"""Alembic environment: uses the caller's connection when one is given."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from broker.models import Base

config = context.config
target_metadata = Base.metadata


def _run_with(connection) -> None:
    context.configure(connection=connection, target_metadata=target_metadata,
                      compare_type=True, render_as_batch=connection.dialect.name == "sqlite")
    # Inside the caller's transaction this is a no-op and the caller commits.
    with context.begin_transaction():
        context.run_migrations()


def run_migrations() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_with(connection)
        return
    url = config.get_main_option("sqlalchemy.url")
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=target_metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            _run_with(conn)
    finally:
        engine.dispose()


run_migrations()

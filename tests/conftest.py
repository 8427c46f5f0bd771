"""Fixtures shared by the suite: one fresh database (or Redis db) per test.

A missing service skips its tests locally and fails them in CI (env ``CI`` set),
so a green CI run always means the PostgreSQL and Redis cases ran.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from functools import cache

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

PG_HOST = "127.0.0.1:5432"
PG_USERS = ("postgres", "root")
# One Redis db for the suite; REVISE_TEST_REDIS_DB lets two checkouts test side by side.
REDIS_URL = f"redis://127.0.0.1:6379/{os.environ.get('REVISE_TEST_REDIS_DB', '15')}"


def _missing_service(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (required in CI)")
    pytest.skip(reason)


@cache
def _pg_admin_url() -> str | None:
    """The first URL that reaches the maintenance database, or None."""
    for user in PG_USERS:
        url = f"postgresql+psycopg://{user}@{PG_HOST}/test"
        engine = create_engine(url, connect_args={"connect_timeout": 3})
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            return url
        except SQLAlchemyError:
            continue
        finally:
            engine.dispose()
    return None


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'store' / 'revise.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    admin_url = _pg_admin_url()
    if admin_url is None:
        _missing_service(f"PostgreSQL is not reachable at {PG_HOST} as {' or '.join(PG_USERS)}")
    assert admin_url is not None
    name = f"revise_t_{uuid.uuid4().hex}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    return request.getfixturevalue(fixture)


@pytest.fixture
def store(store_url):
    from broker.sqlstore import SqlStore

    opened = SqlStore.open(store_url)
    yield opened
    opened.close()


@pytest.fixture
def redis_url() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        client.close()
        _missing_service(f"Redis is not reachable at {REDIS_URL}: {exc}")
    try:
        yield REDIS_URL
        client.flushdb()
    finally:
        client.close()

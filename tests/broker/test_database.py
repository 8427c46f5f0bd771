"""`revise db upgrade`: creates a missing PostgreSQL database when the role may, migrates,
and says what an administrator must run when the role may not."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from broker.database import prepare_database
from broker.errors import StoreUnavailable
from tests.conftest import _missing_service, _pg_admin_url

pytestmark = pytest.mark.postgres


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A URL naming a database that does not exist yet (dropped afterwards)."""
    admin_url = _pg_admin_url()
    if admin_url is None:
        _missing_service("PostgreSQL is not reachable")
    assert admin_url is not None
    name = f"revise_fresh_{uuid.uuid4().hex[:12]}"
    yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text("DROP ROLE IF EXISTS revise_nocreate"))
    finally:
        admin.dispose()


def test_a_missing_database_is_created_then_migrated_once(fresh_url: str) -> None:
    first = prepare_database(fresh_url)
    assert first.created and first.revision is not None
    assert "PostgreSQL at" in first.database and fresh_url.rsplit("/", 1)[1] in first.database
    again = prepare_database(fresh_url)
    assert (again.created, again.revision) == (False, first.revision)


def test_a_role_that_may_not_create_is_told_what_to_ask_for(fresh_url: str) -> None:
    admin_url = _pg_admin_url()
    assert admin_url is not None
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text("DROP ROLE IF EXISTS revise_nocreate"))
        conn.execute(text("CREATE ROLE revise_nocreate LOGIN NOCREATEDB"))
    admin.dispose()
    user = fresh_url.split("://", 1)[1].split("@", 1)[0]
    url = fresh_url.replace(f"{user}@", "revise_nocreate:s3cret@")
    with pytest.raises(StoreUnavailable) as caught:
        prepare_database(url)
    name = fresh_url.rsplit("/", 1)[1]
    assert f"CREATE DATABASE {name} OWNER revise_nocreate" in caught.value.message
    assert "s3cret" not in caught.value.message


def test_a_role_the_server_does_not_know_is_named_not_the_server(fresh_url: str) -> None:
    """PostgreSQL answered (FATAL: role does not exist): the server runs, the user is wrong."""
    user = fresh_url.split("://", 1)[1].split("@", 1)[0]
    with pytest.raises(StoreUnavailable) as caught:
        prepare_database(fresh_url.replace(f"{user}@", "revise_nobody:pw9@"))
    message = caught.value.message
    assert 'role "revise_nobody" does not exist' in message and "pw9" not in message
    assert "check the user and password in REVISE_DATABASE_URL" in message
    assert "running there" not in message

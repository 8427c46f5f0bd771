"""`revise db upgrade`: create the run store's database when it is missing, then migrate.

A fresh PostgreSQL server has no ``revise`` database, and every worker would fail
with ``database "revise" does not exist``. ``prepare_database(url)`` creates it
when the configured role may (``CREATEDB`` or superuser; it connects to the
``postgres`` maintenance database for that), and says plainly what to run when it
may not. SQLite needs only its directory. The schema is then brought to head by
the same Alembic upgrade every process runs when it opens the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import create_engine, make_url, text
from sqlalchemy.exc import DBAPIError, OperationalError

from broker.errors import StoreUnavailable
from broker.outage import describe
from broker.schema import stored_revision
from broker.sqlstore import SqlStore


@dataclass(frozen=True)
class Prepared:
    database: str  # the service, host, port and database (never a password)
    created: bool
    revision: str | None  # the schema's Alembic revision after the upgrade

    def to_json(self) -> dict[str, object]:
        return {"database": self.database, "created": self.created,
                "revision": self.revision}


def create_database(url: str) -> bool:
    """Create the PostgreSQL database named in ``url`` if it is missing; True if created."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql" or not parsed.database:
        return False
    name = parsed.database
    admin = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT",
                          connect_args={"connect_timeout": 10})
    safe = describe(parsed.render_as_string(hide_password=True))
    try:
        with admin.connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"),
                            {"n": name}).first():
                return False
            quoted = conn.dialect.identifier_preparer.quote_identifier(name)
            conn.exec_driver_sql(f"CREATE DATABASE {quoted}")
            return True
    except OperationalError as exc:
        reason = " ".join(str(exc.orig).split())[:200]
        if "FATAL:" in reason:  # the server answered, and refused this user
            raise StoreUnavailable(f"{safe} refused the connection that would create the run "
                                   f"store's database ({reason}); check the user and password "
                                   "in REVISE_DATABASE_URL", url=safe) from exc
        raise StoreUnavailable(f"cannot reach {safe} to create the run store's database "
                               f"({reason}); check that PostgreSQL is running there",
                               url=safe) from exc
    except DBAPIError as exc:
        raise StoreUnavailable(
            f"database {name!r} does not exist and the role of REVISE_DATABASE_URL may not "
            f"create it ({' '.join(str(exc.orig).split())[:200]}); ask an administrator to "
            f"run: CREATE DATABASE {name} OWNER {parsed.username or 'revise'}; then run "
            "`revise db upgrade` again", url=safe) from exc
    finally:
        admin.dispose()


def prepare_database(url: str) -> Prepared:
    """Create the database when missing (and allowed), then migrate it to head."""
    created = create_database(url)
    store = SqlStore.open(url)  # migrates to head, under the upgrade lock
    try:
        revision = stored_revision(store.engine)
    finally:
        store.close()
    return Prepared(describe(make_url(url).render_as_string(hide_password=True)), created,
                    revision)

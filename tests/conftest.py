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

# Under ``pytest -n N`` (tests/run.sh) each worker process gets a Redis db of its own: the
# fixtures flush their db, and a Celery stack's queues and leases live there.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _XDIST_WORKER.startswith("gw") and "REVISE_TEST_REDIS_DB" not in os.environ:
    os.environ["REVISE_TEST_REDIS_DB"] = str(15 - int(_XDIST_WORKER.removeprefix("gw")))

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


# ---- S3: moto's S3 server on 127.0.0.1 (a real HTTP endpoint speaking the S3 protocol) ---


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory) -> Iterator[str]:
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                _missing_service(f"moto's S3 server did not start: {log.read_text()[-500:]}")
            time.sleep(0.1)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def s3_env(s3_endpoint) -> dict[str, str]:
    """REVISE_S3_* for a fresh bucket on the moto server (moto accepts any credentials)."""
    import boto3

    bucket = f"revise-t-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1",
                 aws_access_key_id="test", aws_secret_access_key="test"
                 ).create_bucket(Bucket=bucket)
    return {"REVISE_S3_ENDPOINT_URL": s3_endpoint, "REVISE_S3_BUCKET": bucket,
            "REVISE_S3_PREFIX": "t/", "REVISE_S3_ACCESS_KEY_ID": "test",
            "REVISE_S3_SECRET_ACCESS_KEY": "test", "REVISE_S3_REGION": "us-east-1"}

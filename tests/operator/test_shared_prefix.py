"""Two stacks on one Redis database with the same REVISE_CELERY_QUEUE_PREFIX (or none) but
different run stores take each other's messages: a dispatcher of one records the other's
job in its own store; a sandbox worker drops the other's sandbox message as "a forged or
corrupted queue message"; the reconciler then says the message "was lost (Redis restarted
or evicted it)"; a broker worker writes a `stale_delivery` event ("no longer running")
about a run its store has never seen; `revise submit --wait` times out (exit 3). The
README warns that such stacks "see each other", but no role checks it when it starts: a
worker that finds the prefix in use by workers of another run store must say so in one
ERROR line naming REVISE_CELERY_QUEUE_PREFIX (or refuse to start), before it takes work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

PREFIX = f"t2shared{uuid.uuid4().hex[:6]}"


@pytest.fixture
def second_postgres_url(postgres_url: str) -> Iterator[str]:
    admin_url = postgres_url.rsplit("/", 1)[0] + "/postgres"
    name = f"revise_t_{uuid.uuid4().hex}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _start(tmp_path: Path, name: str, store: str, redis_url: str) -> tuple[subprocess.Popen,
                                                                         Path]:
    home = tmp_path / name
    home.mkdir()
    env = {**os.environ, "REVISE_HOME": str(home), "REVISE_DATABASE_URL": store,
           "REVISE_REDIS_URL": redis_url, "REVISE_CELERY_QUEUE_PREFIX": PREFIX,
           "REVISE_SANDBOX": "process"}
    log = home / "worker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "workers.app", "worker", "-Q",
             f"{PREFIX}dispatch", "-n", f"{name}@%h", "--pool", "threads", "-c", "2",
             "-l", "INFO"], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True)
    deadline = time.monotonic() + 60
    while "ready." not in log.read_text() and proc.poll() is None:
        assert time.monotonic() < deadline, log.read_text()[-2000:]
        time.sleep(0.2)
    return proc, log


def test_a_second_stack_on_the_same_prefix_with_another_store_is_named_at_start(
        tmp_path: Path, postgres_url: str, second_postgres_url: str, redis_url: str
) -> None:
    started = []
    try:
        started.append(_start(tmp_path, "stack-a", postgres_url, redis_url))
        started.append(_start(tmp_path, "stack-b", second_postgres_url, redis_url))
        time.sleep(5)  # whatever a start-up look needs
    finally:
        for proc, _ in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, _ in started:
            proc.wait(30)
    proc_b, log_b = started[1]
    text_b = log_b.read_text()
    refused = proc_b.returncode not in (0, -signal.SIGTERM, None) and \
        "REVISE_CELERY_QUEUE_PREFIX" in text_b
    named = any("ERROR" in line and "REVISE_CELERY_QUEUE_PREFIX" in line
                for line in text_b.splitlines())
    assert refused or named, text_b[-3000:]


def _context(store: str, redis_url: str, prefix: str):
    from broker.settings import Settings
    from workers.config import WorkerSettings
    from workers.context import WorkerContext

    return WorkerContext(Settings(database_url=store, redis_url=redis_url),
                         WorkerSettings(queue_prefix=prefix))


def test_one_store_reached_by_two_addresses_is_one_stack(
        postgres_url: str, second_postgres_url: str, redis_url: str) -> None:
    """Hosts of one deployment reach its store by different names: not named. Another
    store is named once; the prefix is then its own."""
    from workers.preflight import prefix_shared

    prefix = f"t2one{uuid.uuid4().hex[:6]}"
    by_name = postgres_url.replace("127.0.0.1", "localhost")
    assert by_name != postgres_url
    contexts = [_context(url, redis_url, prefix)
                for url in (postgres_url, by_name, second_postgres_url, second_postgres_url)]
    try:
        found = [prefix_shared(ctx) for ctx in contexts]
    finally:
        for ctx in contexts:
            ctx.store.close()
    assert found[:2] == [None, None]
    assert found[2] is not None and prefix in found[2] and "REVISE_CELERY_QUEUE_PREFIX" in found[2]
    assert found[3] is None

"""A client on another run store than its workers says so (a shell without the stack's
REVISE_DATABASE_URL submits, the workers write to PostgreSQL, the client reads its own
SQLite): it said 'revision 1 of run R is missing from the store' of a run that
succeeded."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.envelope import Envelope
from broker.errors import RunNotFound
from broker.settings import Settings
from workers.client import Client, JobHandle
from workers.config import WorkerSettings

from .conftest import script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]


def test_a_client_on_another_run_store_names_its_store_and_the_fix(make_stack,
                                                                   tmp_path: Path) -> None:
    stack = make_stack()  # the workers' store: PostgreSQL
    for role in ("dispatch", "sandbox", "capabilities"):
        stack.worker(role, concurrency=2)
    stack.wait_ready(120)
    own = Settings(home=tmp_path / "shell", redis_url=stack.settings.redis_url)  # SQLite
    client = Client(own, queue=WorkerSettings(queue_prefix=stack.prefix))
    try:
        handle = client.submit(script("e3_v2"), {}, Envelope(), "elsewhere")
        with pytest.raises(RunNotFound) as missing:
            handle.wait(120)
    finally:
        client.close()
    sqlite = f"sqlite:///{tmp_path / 'shell' / 'revise.db'}"
    assert missing.value.message == (
        f"revision 1 of run 'elsewhere' is missing from this client's run store ({sqlite}), "
        "though the dispatcher answered for it: the workers wrote it to another run store; "
        "set REVISE_DATABASE_URL as the workers have it (`revise config` where they run) "
        "and look again: `revise show elsewhere`")
    assert stack.store.get_revision("elsewhere", 1) is not None  # it is in theirs


def test_the_store_is_named_without_its_password(postgres_url: str, tmp_path: Path) -> None:
    user, rest = postgres_url.split("://", 1)[1].split("@", 1)
    url = f"postgresql+psycopg://{user}:s3cret@{rest}"  # trust auth: any password passes
    client = Client(Settings(home=tmp_path, database_url=url))
    handle = JobHandle(client, "j1", "R")
    handle._dispatched = {"job_id": "j1", "run_id": "R", "accepted": True, "revision": 1,
                          "report": None, "error": None}  # as the dispatcher answers
    try:
        with pytest.raises(RunNotFound, match=f"client.s run store \\(postgresql\\+psycopg://"
                                              f"{user}:\\*\\*\\*@") as missing:
            handle.status()
        with pytest.raises(RunNotFound):
            handle.result()
    finally:
        client.close()
    assert "s3cret" not in missing.value.message

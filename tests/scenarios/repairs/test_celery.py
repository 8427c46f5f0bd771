"""A representative subset of the corpus through the Celery stack.

Real dispatcher, sandbox and capability workers as subprocesses (PostgreSQL
store, Redis broker and Redis paid-payload ledger). Each shape runs on its own
run id of one shared stack and must cost exactly what it costs embedded, by the
provider log, and end the same way: the corpus expectations hold, and the
observation equals the embedded one (status, error, call counts, gate verdict,
and every identity's outcome).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from broker.envelope import Envelope
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from sandbox.runner import ProcessRunner
from tests.conftest import REDIS_URL, _missing_service, _pg_admin_url
from tests.workers.conftest import Stack

from .corpus import SHAPES, Shape
from .runner import StepResult, mismatches, read_provider_log, run_shape

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

CELERY = [s for s in SHAPES if s.celery]


def test_the_subset_is_representative() -> None:
    names = {s.name for s in CELERY}
    assert len(names) >= 10
    assert {"comprehension_insert_front", "move_into_helper", "race_reorder",
            "constant_loop_widened_auto"} <= names
    for shape in CELERY:  # the stack's settings are the defaults; no per-prompt latency
        assert not shape.settings and not shape.latency and not shape.xfail, shape.name


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for the subset: its own PostgreSQL database, the test Redis db."""
    import redis

    admin_url = _pg_admin_url()
    if admin_url is None:
        _missing_service("PostgreSQL is not reachable")
    assert admin_url is not None
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3)
    try:
        client.flushdb()
    except redis.RedisError as exc:
        client.close()
        _missing_service(f"Redis is not reachable at {REDIS_URL}: {exc}")
    name = f"revise_t_{uuid.uuid4().hex}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    made = Stack(tmp_path_factory.mktemp("celery"), admin_url.rsplit("/", 1)[0] + f"/{name}",
                 REDIS_URL)
    try:
        made.worker("dispatch")
        made.worker("sandbox", pool="prefork", concurrency=2)
        made.worker("capabilities", concurrency=4)
        made.wait_ready(60)
        yield made
    finally:
        made.stop()
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
        client.flushdb()
        client.close()


def _embedded(shape: Shape, home: Path) -> list[StepResult]:
    services = open_services(Settings(home=home, sandbox=SandboxKind.PROCESS),
                             runner=ProcessRunner())
    try:
        pipeline = services.pipeline()

        def submit(run_id: str, script: str, args: Any, envelope: Envelope) -> dict[str, Any]:
            return pipeline.run(run_id, script, args, envelope).to_json()

        return run_shape(shape, submit,
                         lambda: read_provider_log(services.settings.provider_log_path),
                         "run-1")
    finally:
        services.close()


def _observation(result: StepResult) -> tuple:
    report = result.report
    return (result.paid, report["status"], (report["error"] or {}).get("type"),
            report["calls"], [c["kind"] for c in report["gate"]["counterexamples"]],
            len(report["gate"]["relocations"]), len(report["orphans"]),
            sorted((i["site"], tuple(i["path"]), i["occurrence"], i["outcome"])
                   for i in report["identities"]))


@pytest.mark.parametrize("shape", CELERY, ids=[s.name for s in CELERY])
def test_shape_through_the_queue_costs_what_it_costs_embedded(stack: Stack, shape: Shape,
                                                              tmp_path: Path) -> None:
    run_id = f"q-{shape.name[:40]}"

    def submit(run_id: str, script: str, args: Any, envelope: Envelope) -> dict[str, Any]:
        return stack.client.submit(script, args, envelope, run_id).wait(120)

    queued = run_shape(shape, submit, stack.provider_log, run_id)
    for number, result in enumerate(queued, start=1):
        assert mismatches(result) == [], (shape.name, number, result.report.get("error"))
    embedded = _embedded(shape, tmp_path / "embedded")
    assert [_observation(r) for r in queued] == [_observation(r) for r in embedded]

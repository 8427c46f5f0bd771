"""Where `revise repair --execute` runs candidates: embedded unless the settings name a
deployment (a broker or Redis configured and a PostgreSQL run store), or say so."""

from __future__ import annotations

import pytest

from broker.settings import RepairVia, Settings

PG = "postgresql+psycopg://revise@db/revise"


@pytest.mark.parametrize(("env", "via"), [
    ({}, "embedded"),  # no broker configured: embedded stays the default
    ({"REVISE_DATABASE_URL": PG}, "embedded"),  # a database but no broker named
    ({"REVISE_REDIS_URL": "redis://r:6379/0"}, "embedded"),  # a broker, SQLite under HOME
    ({"REVISE_REDIS_URL": "redis://r:6379/0", "REVISE_DATABASE_URL": PG}, "queue"),
    ({"REVISE_CELERY_BROKER_URL": "redis://r:6379/1", "REVISE_DATABASE_URL": PG}, "queue"),
    ({"REVISE_REDIS_URL": "redis://r:6379/0", "REVISE_DATABASE_URL": PG,
      "REVISE_REPAIR_VIA": "embedded"}, "embedded"),
    ({"REVISE_REPAIR_VIA": "queue"}, "queue"),
])
def test_auto_picks_the_queue_only_on_a_deployment(monkeypatch, env, via) -> None:
    for key in ("REVISE_REDIS_URL", "REVISE_CELERY_BROKER_URL", "REVISE_DATABASE_URL",
                "REVISE_REPAIR_VIA"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert Settings().resolved_repair_via == RepairVia(via)


def test_a_bad_value_names_the_choices(monkeypatch) -> None:
    monkeypatch.setenv("REVISE_REPAIR_VIA", "celery")
    with pytest.raises(ValueError, match="embedded"):
        Settings()

"""Settings as an operator meets them: URL spellings, a bad value in a command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.errors import ConfigError
from broker.settings import (
    Settings,
    header_map,
    mask_url,
    normalize_database_url,
    provider_problem,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("given", "expected"), [
    ("postgres://u:pw@db:5432/revise", "postgresql+psycopg://u:pw@db:5432/revise"),
    ("postgresql://u@db/revise", "postgresql+psycopg://u@db/revise"),
    ("postgresql+psycopg://u@db/revise", "postgresql+psycopg://u@db/revise"),
    ("postgresql+psycopg2://u@db/revise", "postgresql+psycopg2://u@db/revise"),
    ("sqlite:////var/lib/revise/revise.db", "sqlite:////var/lib/revise/revise.db"),
    ("sqlite+pysqlite:///x.db", "sqlite+pysqlite:///x.db"),
])
def test_database_url_spellings(given: str, expected: str) -> None:
    assert normalize_database_url(given) == expected
    settings = Settings(database_url=given)
    assert settings.resolved_database_url == expected
    assert settings.run_store_is_shared == expected.startswith("postgresql")


@pytest.mark.parametrize(("given", "says"), [
    ("mysql://u@db/revise", "unknown scheme mysql://"),
    ("db.example.com/revise", "not a database URL"),
    ("postgres://u@db:port/revise", "cannot be parsed"),
])
def test_a_bad_database_url_names_the_variable_and_the_accepted_forms(given: str,
                                                                      says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(database_url=given)
    message = caught.value.message
    assert message.startswith("REVISE_DATABASE_URL: ") and says in message
    assert "postgres:// and postgresql://" in message and "sqlite:///" in message


def test_a_bad_value_is_a_config_error_not_a_validation_traceback() -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(sandbox="dockr", sandbox_warm=-1)
    assert caught.value.problems[0].startswith("REVISE_SANDBOX: ")
    assert caught.value.problems[1].startswith("REVISE_SANDBOX_WARM: ")


def test_passwords_inside_urls_are_masked() -> None:
    assert mask_url("postgresql+psycopg://u:s3cret@db/r") == "postgresql+psycopg://u:***@db/r"
    assert mask_url("redis://:s3cret@redis:6379/0") == "redis://:***@redis:6379/0"
    assert mask_url("redis://redis:6379/0") == "redis://redis:6379/0"


def _revise(*argv: str, env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.upper().startswith("REVISE_")}
    done = subprocess.run([sys.executable, "-m", "workers.cli", *argv],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**clean, "REVISE_HOME": str(tmp_path / "home"),
                               "COLUMNS": "200", **env})
    assert "Traceback" not in done.stderr, done.stderr
    return done


def test_a_bad_database_url_is_one_error_line_in_a_command(tmp_path: Path) -> None:
    done = _revise("runs", env={"REVISE_DATABASE_URL": "mysql://u:pw@db/r"},
                   tmp_path=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: REVISE_DATABASE_URL: unknown scheme mysql://; use postgresql+psycopg://"
        "USER:PASSWORD@HOST:5432/DB (postgres:// and postgresql:// mean the same), or "
        "sqlite:///PATH"]


@pytest.mark.postgres
def test_the_postgres_spelling_reaches_a_real_database(tmp_path: Path, postgres_url: str) -> None:
    """The form `pg_ctl`, Heroku and most tools print, through the commands that use it."""
    plain = postgres_url.replace("postgresql+psycopg://", "postgres://", 1)
    upgraded = _revise("db", "upgrade", "--json", tmp_path=tmp_path,
                       env={"REVISE_DATABASE_URL": plain})
    assert upgraded.returncode == 0, upgraded.stderr
    done = _revise("runs", "--json", tmp_path=tmp_path, env={"REVISE_DATABASE_URL": plain})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"runs": []}


@pytest.mark.parametrize("path", ["/requests", "requests/{key}", "/requests/{id}"])
def test_a_lookup_path_must_hold_the_key(path: str) -> None:
    """Without {key} every call's lookup asks one address, and its "no record" would
    decide that calls it is not about were never charged."""
    with pytest.raises(ConfigError, match=r"REVISE_PROVIDER_LOOKUP_PATH: .*\{key\}"):
        Settings(provider_lookup_path=path)


@pytest.mark.parametrize("name", ["api key", "", "Authorization:", "x" * 65])
def test_a_key_header_must_be_a_header_name(name: str) -> None:
    with pytest.raises(ConfigError, match=r"REVISE_PROVIDER_API_KEY_HEADER: .* header name"):
        Settings(provider_api_key_header=name)


@pytest.mark.parametrize("url", ["redis://h:6379/0", "rediss://h:6380/1",
                                 "unix:///run/redis.sock", "sentinel://h:26379"])
def test_redis_urls_of_every_kind_redis_serves_are_taken(url: str) -> None:
    assert Settings(redis_url=url, celery_broker_url=url).resolved_broker_url == url


@pytest.mark.parametrize(("field", "variable"), [
    ("redis_url", "REVISE_REDIS_URL"), ("celery_broker_url", "REVISE_CELERY_BROKER_URL"),
    ("celery_result_backend", "REVISE_CELERY_RESULT_BACKEND")])
def test_a_redis_url_of_another_scheme_is_refused_at_start(field: str, variable: str) -> None:
    with pytest.raises(ConfigError, match=rf"{variable}: 'http://u:\*\*\*@h' is not a "
                                          "Redis URL; write redis://"):
        Settings(**{field: "http://u:pw@h"})


@pytest.mark.parametrize(("value", "why"), [
    ("Helicone-Auth: x", "is not JSON"), ('["x"]', "is not a JSON object"),
    ('{"a b": "x"}', "'a b' is not an HTTP header name"),
    ('{"Idempotency-Key": "x"}', "'Idempotency-Key' is set by Revise itself"),
    ('{"X-Key": 7}', "the value of 'X-Key' is not one line of text"),
    ('{"X-Key": "a\\r\\nHost: evil"}', "the value of 'X-Key' is not one line of text"),
])
def test_extra_headers_must_be_a_json_object_of_header_lines(value: str, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Settings(provider_headers=value)
    assert caught.value.message == f"REVISE_PROVIDER_HEADERS: {why}" or \
        caught.value.message.startswith(f"REVISE_PROVIDER_HEADERS: {why}")
    assert "evil" not in caught.value.message  # the values are never echoed


def test_extra_headers_are_a_secret_and_empty_is_none() -> None:
    settings = Settings(provider_headers='{"Helicone-Auth": "Bearer sk-h"}', model_headers="")
    assert "sk-h" not in repr(settings) and settings.model_headers is None
    assert header_map(settings.provider_headers) == {"Helicone-Auth": "Bearer sk-h"}


@pytest.mark.parametrize(("url", "problem"), [
    ("https://api.openai.com/v1/images/generations", "ends with the endpoint "
     "/images/generations"),
    ("https://api.openai.com/v1/chat/completions/", "ends with the endpoint /chat/completions"),
    ("https://res.openai.azure.com/openai/v1?api-version=preview", "holds a query"),
])
def test_a_base_url_must_be_the_api_prefix_alone(url: str, problem: str) -> None:
    """An endpoint pasted whole from an API's reference sent every request to
    .../images/generations/images/generations (a 404 at each call)."""
    found = provider_problem(Settings(provider="http", provider_base_url=url))
    assert found is not None and problem in found and "prefix" in found
    assert provider_problem(Settings(provider="http",
                                     provider_base_url="https://api.openai.com/v1/")) is None


def test_an_empty_lookup_path_is_none() -> None:
    assert Settings(provider_lookup_path="").provider_lookup_path is None
    assert Settings(provider_lookup_path="/r/{key}").provider_lookup_path == "/r/{key}"

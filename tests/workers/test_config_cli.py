"""`revise config` shows every layer's settings and their problems; every other command
warns about a variable nothing reads."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from broker.settings import Settings
from tests.broker.test_settings_env import _revise
from workers.config_cli import _table


def test_a_misspelt_variable_is_a_warning_line_for_every_command(tmp_path: Path) -> None:
    done = _revise("runs", env={"REVISE_DATABSE_URL": "sqlite:///x.db"}, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "REVISE_DATABSE_URL" in line]
    assert lines == ["WARNING revise.settings: REVISE_DATABSE_URL is not a Revise setting "
                     "and is ignored; did you mean REVISE_DATABASE_URL?"]


def test_revise_config_shows_every_setting_masked_with_its_source(tmp_path: Path) -> None:
    done = _revise("config", "--json", tmp_path=tmp_path, env={
        "REVISE_DATABASE_URL": "postgres://revise:s3cret@127.0.0.1:1/nowhere",
        "REVISE_MODEL_API_KEY": "sk-s3cret", "REVISE_CELERY_QUEUE_PREFIX": "a-",
        "REVISE_PROCESS_ISOLATION": "weak", "REVISE_FLOWER_AUTH": "ops:s3cret"})
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout + done.stderr
    data = json.loads(done.stdout)
    rows = {row["variable"]: row for row in data["settings"]}
    assert rows["REVISE_DATABASE_URL"] == {
        "variable": "REVISE_DATABASE_URL", "source": "env",
        "value": "postgresql+psycopg://revise:***@127.0.0.1:1/nowhere"}
    assert rows["REVISE_MODEL_API_KEY"]["value"] == "***"
    assert rows["REVISE_FLOWER_AUTH"]["value"] == "***"
    assert rows["REVISE_FLOWER_ADDRESS"]["value"] == "127.0.0.1"
    assert rows["REVISE_CELERY_QUEUE_PREFIX"] == {
        "variable": "REVISE_CELERY_QUEUE_PREFIX", "value": "a-", "source": "env"}
    assert rows["REVISE_PROCESS_ISOLATION"]["value"] == "weak"
    assert rows["REVISE_LEDGER_POLICY"] == {
        "variable": "REVISE_LEDGER_POLICY", "value": "auto", "source": "default"}
    # An unset setting that follows another shows what it is (it showed empty).
    assert rows["REVISE_CELERY_BROKER_URL"] == {
        "variable": "REVISE_CELERY_BROKER_URL", "value": rows["REVISE_REDIS_URL"]["value"],
        "source": "default"}
    assert rows["REVISE_ARTIFACT_STORE"]["value"] == "database"  # on PostgreSQL
    assert set(rows) >= {f"REVISE_{f.upper()}" for f in Settings.model_fields}
    assert data["problems"] == []
    # On a terminal of 80 columns every name is whole (they were cut:
    # REVISE_PROVIDER_HONOURS_IDEMPO…), the values fold.
    terminal = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    _table(terminal, data["settings"], [])
    shown = terminal.file.getvalue()
    assert re.search(r"REVISE_CELERY_QUEUE_PREFIX\s.*a-\s.*env", shown), shown
    assert max(map(len, shown.splitlines())) <= 80
    names = set(re.findall(r"│ (REVISE_\w+)", shown))
    assert names == {row["variable"] for row in data["settings"]}, shown


def test_piped_revise_config_is_one_whole_line_per_setting(tmp_path: Path) -> None:
    """`revise config | grep DATABASE_URL` showed the URL cut where the table folded it."""
    url = ("postgresql+psycopg://revise:s3cret@a-rather-long-database-host.example.internal:"
           "5432/a_rather_long_database_name")
    piped = _revise("config", tmp_path=tmp_path, env={
        "REVISE_DATABASE_URL": url, "REVISE_SANDBOX": "process", "COLUMNS": "80"})
    assert piped.returncode == 0 and "s3cret" not in piped.stdout
    lines = piped.stdout.splitlines()
    assert ("REVISE_DATABASE_URL\t" + url.replace("s3cret", "***") + "\tenv") in lines
    assert "REVISE_SANDBOX\tprocess\tenv" in lines
    assert "REVISE_S3_BUCKET\t\tdefault" in lines  # unset: an empty value
    assert all(line.count("\t") == 2 for line in lines), lines


def test_revise_config_check_is_one_line_per_problem(tmp_path: Path) -> None:
    ok = _revise("config", "--check", env={}, tmp_path=tmp_path)
    assert ok.returncode == 0 and ok.stdout.startswith("ok: ")
    done = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_DATABASE_URL": "postgres://u:s3cret@db:port/r", "REVISE_CELERY_LEASE_SECONDZ": "9",
        "REVISE_CELERY_WAVE_CHUNK": "0"})
    assert done.returncode == 2
    assert "s3cret" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, lines
    assert all(line.startswith("error: ") for line in lines)
    assert lines[0].startswith("error: REVISE_DATABASE_URL: cannot be parsed")
    assert lines[1].startswith("error: REVISE_CELERY_WAVE_CHUNK: ")
    assert lines[2] == ("error: REVISE_CELERY_LEASE_SECONDZ is not a Revise setting and is "
                        "ignored; did you mean REVISE_CELERY_LEASE_SECONDS?")
    as_json = _revise("config", "--check", "--json", tmp_path=tmp_path,
                      env={"REVISE_SANBOX": "process"})
    assert as_json.returncode == 2
    assert json.loads(as_json.stdout) == {"ok": False, "problems": [
        "REVISE_SANBOX is not a Revise setting and is ignored; did you mean REVISE_SANDBOX?"]}


def test_revise_config_check_names_what_a_role_would_refuse(tmp_path: Path) -> None:
    """Problems between settings, per role, without connecting to anything."""
    done = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_FLOWER_ADDRESS": "0.0.0.0"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: broker workers would refuse to start: REVISE_PROVIDER=http needs "
        "REVISE_PROVIDER_BASE_URL, e.g. https://api.openai.com/v1",
        "error: flower would refuse to start: Flower would be reachable from other hosts at "
        "0.0.0.0 without authentication (it can shut workers down); set REVISE_FLOWER_AUTH="
        "user:password (Flower's basic auth; serve it over TLS) or Flower's --auth options, "
        "or keep REVISE_FLOWER_ADDRESS=127.0.0.1"]
    schemeless = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": "api.openai.com/v1"})
    assert schemeless.stderr.strip().splitlines() == [
        "error: broker workers would refuse to start: REVISE_PROVIDER_BASE_URL="
        "api.openai.com/v1 is not an http(s) URL; write it with its scheme and API prefix, "
        "e.g. https://api.openai.com/v1"]
    model = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_MODEL_BASE_URL": "api.example.com/v1"})
    assert model.stderr.strip().splitlines() == [
        "error: revise repair would refuse to ask the model: model base URL "
        "'api.example.com/v1' is not an http(s) URL; set REVISE_MODEL_BASE_URL with its "
        "scheme, e.g. http://127.0.0.1:4000/v1"]
    embedded = _revise("runs", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": "api.openai.com/v1"})
    assert embedded.returncode == 0  # a command that calls no provider is not refused
    (tmp_path / "s.py").write_text("async def orchestrate(ctx, args):\n    return 1\n")
    run = _revise("run", "s.py", "--run-id", "r", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": "api.openai.com/v1"})
    assert run.returncode == 2  # refused before a run exists: it used to fail at its call
    assert run.stderr.strip().endswith("e.g. https://api.openai.com/v1"), run.stderr
    fixed = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": "http://127.0.0.1:9/v1",
        "REVISE_PROVIDER_API_KEY": "sk-s3cret",
        "REVISE_FLOWER_ADDRESS": "0.0.0.0", "REVISE_FLOWER_AUTH": "ops:s3cret"})
    assert fixed.returncode == 0 and "s3cret" not in fixed.stdout + fixed.stderr


def test_revise_config_check_names_each_setting_a_role_cannot_start_with(
        tmp_path: Path) -> None:
    """Each of these said `ok`, and its role then failed (or took every call and failed
    it): the words are the ones the role refuses to start with."""
    cases = {
        "unknown provider": ({"REVISE_PROVIDER": "openai"}, [
            "error: broker workers would refuse to start: REVISE_PROVIDER=openai is not a "
            "provider; use local or http"]),
        "http without a key": ({"REVISE_PROVIDER": "http",
                                "REVISE_PROVIDER_BASE_URL": "https://api.openai.com/v1"}, [
            "error: broker workers would refuse to start: REVISE_PROVIDER=http needs "
            "REVISE_PROVIDER_API_KEY (the provider's key; REVISE_PROVIDER_API_KEY_HEADER="
            "api-key for Azure OpenAI; any value, as vLLM's EMPTY, for a server that checks "
            "none), or REVISE_PROVIDER_HEADERS holding a gateway's own key"]),
        "a prefix the Procfile splits": ({"REVISE_CELERY_QUEUE_PREFIX": "my stack-"}, [
            "error: REVISE_CELERY_QUEUE_PREFIX: 'my stack-' holds a character a queue name "
            "in the Procfile cannot; use only letters, digits, '.', '_', ':' and '-', e.g. "
            "stack1-"]),
        "a HOME that cannot be created": ({"REVISE_HOME": "/proc/revise"}, [
            "error: every role would refuse to start: REVISE_HOME=/proc/revise cannot be "
            "created (making a directory in /proc failed: No such file or directory); set "
            "REVISE_HOME to a directory this user can create and write, e.g. $PWD/.revise"]),
    }
    for name, (env, expected) in cases.items():
        done = _revise("config", "--check", tmp_path=tmp_path, env=env)
        assert (done.returncode, done.stderr.strip().splitlines()) == (2, expected), name
    file = tmp_path / "a-file"
    file.write_text("")
    under_a_file = _revise("config", "--check", tmp_path=tmp_path,
                           env={"REVISE_HOME": str(file / "home")})
    assert f"{file} is not a directory" in under_a_file.stderr
    gateway = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL": "https://gw.example/v1",
        "REVISE_PROVIDER_HEADERS": '{"X-Gateway-Key": "g-s3cret"}',
        "REVISE_CELERY_QUEUE_PREFIX": "stack.1:a_b-"})
    assert gateway.returncode == 0, gateway.stderr
    assert not list((tmp_path / "home").parent.glob(".revise-probe-*"))  # nothing left


def test_revise_config_check_names_a_redis_url_and_an_s3_store_that_cannot_work(
        tmp_path: Path) -> None:
    redis = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_REDIS_URL": "http://ops:s3cret@127.0.0.1:6379/0"})
    assert redis.returncode == 2 and "s3cret" not in redis.stderr
    assert redis.stderr.strip().splitlines() == [
        "error: REVISE_REDIS_URL: 'http://ops:***@127.0.0.1:6379/0' is not a Redis URL; "
        "write redis://HOST:PORT/DB (rediss:// for TLS, unix:///PATH for a socket)"]
    s3 = _revise("config", "--check", tmp_path=tmp_path, env={"REVISE_ARTIFACT_STORE": "s3"})
    assert s3.returncode == 2
    assert s3.stderr.strip().splitlines() == [
        "error: every role would fail to keep or read an artifact: REVISE_ARTIFACT_STORE=s3 "
        "needs a bucket: set REVISE_S3_BUCKET (and REVISE_S3_ENDPOINT_URL for a non-AWS "
        "endpoint), or choose REVISE_ARTIFACT_STORE=file|database"]
    fixed = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_REDIS_URL": "rediss://127.0.0.1:6379/0", "REVISE_ARTIFACT_STORE": "s3",
        "REVISE_S3_BUCKET": "shots"})
    assert fixed.returncode == 0, fixed.stderr


def test_revise_config_check_names_a_provider_configured_but_not_chosen(
        tmp_path: Path) -> None:
    """The base URL and key set, REVISE_PROVIDER forgotten: every call would be answered
    by the local fake, free and made up, while the operator believes OpenAI is called."""
    done = _revise("config", "--check", tmp_path=tmp_path, env={
        "REVISE_PROVIDER_BASE_URL": "https://api.openai.com/v1",
        "REVISE_PROVIDER_API_KEY": "sk-s3cret"})
    assert done.returncode == 2 and "s3cret" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: no provider would be called: REVISE_PROVIDER_BASE_URL and "
        "REVISE_PROVIDER_API_KEY are set but REVISE_PROVIDER is local: every call is "
        "answered by the local fake provider; set REVISE_PROVIDER=http to call that "
        "provider, or unset them"]

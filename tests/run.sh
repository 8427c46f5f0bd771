#!/usr/bin/env bash
# The whole test suite from a fresh machine: installs the project, starts what the
# tests need (Redis, PostgreSQL, a Docker engine, the sandbox image) and runs pytest.
# Idempotent: anything already installed or running is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n==> %s\n' "$*"; }

say "installing revise and its test tools"
python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'

say "checking Redis on 127.0.0.1:6379"
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-server; }
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/revise-tests.log
  for _ in $(seq 50); do redis-cli ping >/dev/null 2>&1 && break; sleep 0.2; done
fi

say "checking PostgreSQL on 127.0.0.1:5432"
if ! pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1; then
  if ls /etc/postgresql >/dev/null 2>&1; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  else
    apt-get update -qq && apt-get install -y -qq postgresql
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start
  fi
  for _ in $(seq 50); do pg_isready -h 127.0.0.1 -p 5432 >/dev/null 2>&1 && break; sleep 0.2; done
fi

say "checking headless Chromium (the HTML run report is rendered in it)"
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
  apt-get update -qq && apt-get install -y -qq chromium chromium-driver
fi

say "starting the Docker engine (if needed)"
bash sandbox/engine.sh

say "checking docker compose (the compose tests validate compose.yaml with it)"
if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
  apt-get update -qq && apt-get install -y -qq docker-compose
fi

say "building the sandbox image (fast when current)"
revise sandbox build

say "lint (ruff) and types of the core (mypy)"
ruff check .
mypy

# The tests start many Python processes; with PYTHONDONTWRITEBYTECODE set (as on this
# machine) each would compile every module of the project again.
say "compiling the project"
python3 -m compileall -q -x '/fixtures/' orchestrator broker sandbox workers tests bench

say "running the tests (three processes: each gets its own Redis db, tests/conftest.py)"
export CI="${CI:-true}"
python3 -m pytest -q -p no:cacheprovider -p no:benchmark -n "${PYTEST_PROCESSES:-3}" "$@"

"""Outages named plainly: which service, at which host and port (never a password).

An operator reading "ConnectionError" cannot tell Redis from PostgreSQL, nor which
Redis. ``where(url)`` names a service from its URL; ``queue_unavailable`` turns a
Redis/kombu/Celery-backend error into a ``QueueUnavailable`` that says which Redis,
what was being done and what to check.
"""

from __future__ import annotations

import re
import sys
from urllib.parse import urlsplit

from broker.errors import QueueUnavailable

_DEFAULT_PORTS = {"redis": 6379, "rediss": 6379, "postgresql": 5432, "mysql": 3306,
                  "amqp": 5672}
_NAMES = {"redis": "Redis", "rediss": "Redis", "postgresql": "PostgreSQL", "sqlite": "SQLite",
          "mysql": "MySQL", "amqp": "RabbitMQ"}


def where(url: str) -> tuple[str, str, int | None, str]:
    """(service, host, port, detail) of ``url``; the password never leaves this function."""
    parts = urlsplit(url)
    scheme = parts.scheme.split("+", 1)[0]
    service = _NAMES.get(scheme, scheme or "service")
    if scheme == "sqlite":
        return service, "localhost", None, f"file {parts.path[1:] or ':memory:'}"
    try:
        port = parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:
        port = None
    path = parts.path.lstrip("/")
    detail = (f"db {path or 0}" if service == "Redis" else f"database {path}" if path else "")
    return service, parts.hostname or "localhost", port, detail


def describe(url: str) -> str:
    """``Redis at 127.0.0.1:6379 (db 0)``, ``PostgreSQL at db.internal:5432 (database r)``."""
    service, host, port, detail = where(url)
    address = host if port is None else f"{host}:{port}"
    if service == "SQLite":
        return f"SQLite ({detail})"
    return f"{service} at {address}" + (f" ({detail})" if detail else "")


def is_queue_outage(exc: BaseException) -> bool:
    """A connection failure of Redis as Celery broker, result backend or lease store.

    Nothing is imported to tell: an error of kombu or redis can only exist once they are
    loaded (the CLI asks this of every exit, and importing them took 0.1 s)."""
    kinds: list[type[BaseException]] = []
    if (kombu := sys.modules.get("kombu.exceptions")) is not None:
        kinds.append(kombu.OperationalError)
    if (redis := sys.modules.get("redis.exceptions")) is not None:
        kinds += [redis.ConnectionError, redis.TimeoutError]
    if kinds and isinstance(exc, tuple(kinds)):
        return True
    # Celery's result backend gives up reconnecting with a bare RuntimeError.
    return isinstance(exc, RuntimeError) and "Celery result store" in str(exc)


_CREDENTIALS = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def _reason(exc: BaseException) -> str:
    text = _CREDENTIALS.sub(r"\1***@", " ".join(str(exc).split())) or type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."


def queue_unavailable(url: str, action: str, exc: BaseException, *,
                      identity: str | None = None) -> QueueUnavailable:
    service, host, port, _ = where(url)
    return QueueUnavailable(
        f"{describe(url)} is unavailable while {action} ({_reason(exc)}); it is the Celery "
        f"broker and result backend: check that {service} is running and reachable at "
        f"{host}:{port} (REVISE_REDIS_URL / REVISE_CELERY_BROKER_URL)",
        service=service, host=host, port=port, identity=identity)

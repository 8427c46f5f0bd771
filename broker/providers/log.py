"""The provider log: one JSON line per real provider execution.

Tests and benchmarks count provider calls from this file ("no call paid
twice"), so every execute that reaches a provider is written, rejected calls
included. Each line is a single ``write()`` on a descriptor opened with
``O_APPEND`` for that write, so threads and separate worker processes can
share the file without interleaving lines.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker.catalog import Capability
from broker.errors import CapabilityError, ReviseError
from broker.identity import payload_digest
from broker.providers.base import CallContext, Provider, ProviderResult


class ProviderLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, entry: dict[str, Any]) -> None:
        line = (json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
                + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                written = os.write(fd, line)
                if written != len(line):  # regular files write fully; never leave half a line
                    raise OSError(f"short write to {self.path}: {written} of {len(line)} bytes")
                os.fsync(fd)
            finally:
                os.close(fd)

    def read(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        lines = text.splitlines()
        entries = []
        for number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            try:
                entries.append(json.loads(raw))
            except json.JSONDecodeError:
                if number == len(lines) and not text.endswith("\n"):
                    break  # a line torn by a crash mid-write; everything before it is whole
                raise
        return entries


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LoggedProvider:
    """Wraps a provider; logs every execute, then returns or raises unchanged.

    If the log cannot be written the ``OSError`` propagates, even after a
    successful call: an execution that cannot be audited is not reported as
    a success (fail closed). The provider idempotency key makes the broker's
    retry of that identity safe with providers that honour it.
    """

    def __init__(self, inner: Provider, log: ProviderLog) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name

    def _provider(self, capability: Capability) -> Provider:
        resolve = getattr(self.inner, "provider_for", None)
        return resolve(capability) if resolve else self.inner

    def execute(self, capability: Capability, payload: dict,
                call: CallContext) -> ProviderResult:
        provider = self._provider(capability)
        # Whether the provider itself can deduplicate a retry of this call (the window of
        # a crash between dispatch and commit is closed there, not only detected here).
        covered = bool(getattr(provider, "sends_idempotency_key", False))
        entry: dict[str, Any] = {
            "run_id": call.run_id, "identity": call.identity, "capability": capability.name,
            "digest": payload_digest(payload), "idempotency_key": call.idempotency_key,
            "idempotency_covered": covered, "provider": provider.name,
        }
        try:
            result = self.inner.execute(capability, payload, call)
        except Exception as exc:
            self.log.append({**entry, "ts": _now(), "outcome": "error",
                             **_error_fields(exc)})
            raise
        # The result itself (for a paid artifact: its reference) is logged with the call,
        # so a result whose commit was lost can be written back from here
        # (`revise reconcile R ID --from-log`), never paid twice.
        self.log.append({**entry, "ts": _now(), "outcome": "ok", "status": None,
                         "error_code": None, "result": result.result})
        return replace(result, usage={**result.usage, "idempotency_key_sent": covered})


def _error_fields(exc: Exception) -> dict[str, Any]:
    if isinstance(exc, CapabilityError):
        return {"status": exc.fields.get("status"),
                "error_code": exc.fields.get("provider_code") or exc.code}
    if isinstance(exc, ReviseError):
        return {"status": None, "error_code": exc.code}
    return {"status": None, "error_code": type(exc).__name__}

"""The provider log: two JSON lines per real provider execution (a dispatch).

Before the provider is called an intent line (``"phase": "sent"``) names the
run, identity, payload digest and idempotency key; it is fsynced, so a
dispatch killed mid-call still leaves proof that a request may have left.
After the answer the outcome line (``"phase": "answered"``) repeats those
fields with the outcome, under the same ``"dispatch"`` id.

Tests, benchmarks and ``revise reconcile --from-log`` count and read
dispatches through ``ProviderLog.read()`` ("no call paid twice"), which
returns one entry per dispatch, rejected calls included. Each line is a single
``write()`` on a descriptor opened with ``O_APPEND`` for that write, so
threads and separate worker processes can share the file without
interleaving lines.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
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
        """One entry per dispatch, in the order dispatches ended.

        An answered dispatch is its outcome line; a dispatch with only an intent line
        (the request left, no answer was recorded: a crash mid-call, or a call still
        running) is that line with ``"outcome": "sent"`` and no status or error code,
        at the position of its intent line. Lines without a phase (logs written before
        intent lines) are one dispatch each, as written.
        """
        return dispatches(self.lines())

    def lines(self) -> list[dict[str, Any]]:
        """Every whole line as written (intent and outcome lines apart)."""
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


SENT = "sent"
ANSWERED = "answered"


def dispatches(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Fold intent and outcome lines into one entry per dispatch (see ``ProviderLog.read``)."""
    merged: dict[tuple[str, Any], dict[str, Any]] = {}
    for number, line in enumerate(lines):
        dispatch, phase = line.get("dispatch"), line.get("phase")
        if dispatch is None or phase not in (SENT, ANSWERED):
            merged[("line", number)] = line  # the old format: one line per dispatch
        elif phase == SENT:
            merged.setdefault(("dispatch", dispatch),
                              {**line, "outcome": SENT, "status": None, "error_code": None})
        else:
            # The answer moves the dispatch to where it ended, as the outcome line alone did.
            merged.pop(("dispatch", dispatch), None)
            merged[("dispatch", dispatch)] = line
    return list(merged.values())


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LoggedProvider:
    """Wraps a provider; logs every execute before and after, then returns or raises unchanged.

    If the intent line cannot be written the ``OSError`` propagates and the
    provider is not called. If the outcome line cannot be written the
    ``OSError`` propagates even after a successful call: an execution that
    cannot be audited is not reported as a success (fail closed). The
    provider idempotency key makes the broker's retry of that identity safe
    with providers that honour it.
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
        dispatch = uuid.uuid4().hex
        # The intent line is fsynced before the request: a dispatch killed mid-call still
        # names its identity and key (a request may have left; it may have been charged).
        self.log.append({**entry, "phase": SENT, "ts": _now(), "dispatch": dispatch})
        entry = {**entry, "phase": ANSWERED, "dispatch": dispatch}
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

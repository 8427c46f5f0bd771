"""The provider log: two JSON lines per real provider execution (a dispatch).

Before the provider is called an intent line (``"phase": "sent"``) names the
run, identity, payload digest and idempotency key; it is fsynced, so a
dispatch killed mid-call still leaves proof that a request may have left.
After the answer the outcome line (``"phase": "answered"``) repeats those
fields with the outcome, under the same ``"dispatch"`` id.

Tests, benchmarks and ``revise reconcile --from-log`` count and read
dispatches through ``ProviderLog.read()`` ("no call paid twice"), which
returns one entry per dispatch, rejected calls included. Each line is a single
``write()`` on a descriptor opened with ``O_APPEND`` for that write, under an
exclusive ``flock``, so threads and separate worker processes can share the file
without interleaving lines.

The log never stands between a request and its answer: the run store holds each
attempt's dispatch record (``sent_at``, ``answered_at``) and the commit is the
truth. A line that cannot be written (a full disk) is written not at all (a short
write is truncated away), the log says it is ``degraded`` and why, and the call
goes on; readers skip any line that is not whole.
"""

from __future__ import annotations

import fcntl
import json
import logging
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
from broker.providers.base import CallContext, Lookup, Provider, ProviderResult, lookup_at

log = logging.getLogger("revise.provider_log")


class ProviderLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.degraded: str | None = None  # why the last line could not be written

    def append(self, entry: dict[str, Any]) -> bool:
        """Write one line whole (fsynced) or not at all; False, loudly, when it could not
        be written. Never raises."""
        line = (json.dumps(entry, sort_keys=True, separators=(",", ":"), default=str)
                + "\n").encode("utf-8")
        try:
            with self._lock:
                self._write(line)
        except OSError as exc:
            self.degraded = f"{self.path}: {exc.strerror or exc}"
            log.error("the provider log cannot be written (%s); the %s line of %s is not "
                      "in it (the run store's dispatch record is)", self.degraded,
                      entry.get("phase", "dispatch"), entry.get("identity"))
            return False
        self.degraded = None
        return True

    def _write(self, line: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # other processes append between our steps
            start = os.fstat(fd).st_size
            try:
                written = os.write(fd, line)
                if written != len(line):
                    raise OSError(28, f"short write: {written} of {len(line)} bytes")
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, start)  # half a line is never left behind
                raise
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
        entries = []
        for raw in text.splitlines():
            if not raw.strip():
                continue
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue  # a line torn by a crash or a full disk mid-write
            if isinstance(entry, dict):
                entries.append(entry)
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


def peak_in_flight(lines: list[dict[str, Any]]) -> int:
    """The most requests in flight at once, from intent and outcome lines (``lines()``)."""
    points = sorted((line["ts"], 1 if line.get("phase") == SENT else -1) for line in lines
                    if line.get("phase") in (SENT, ANSWERED))
    level = peak = 0
    for _, step in points:
        level += step
        peak = max(peak, level)
    return peak


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class LoggedProvider:
    """Wraps a provider; logs every execute before and after, then returns or raises
    unchanged, whether or not the log could be written (``ProviderLog.append``): a paid
    answer is never turned into a failure by a local disk. ``degraded`` says why the log
    is missing lines."""

    def __init__(self, inner: Provider, log: ProviderLog) -> None:
        self.inner = inner
        self.log = log
        self.name = inner.name

    @property
    def degraded(self) -> str | None:
        return self.log.degraded

    def lookup(self, capability: Capability, payload: dict, call: CallContext) -> Lookup:
        """Asking what the provider did is not a dispatch: nothing is logged or paid."""
        return lookup_at(self.inner, capability, payload, call)

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
        return {"status": exc.status, "error_code": exc.provider_code}
    if isinstance(exc, ReviseError):
        return {"status": None, "error_code": exc.code}
    return {"status": None, "error_code": type(exc).__name__}

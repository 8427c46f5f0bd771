"""Crash a real host process mid-call (SIGKILL) and recover like an operator would."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

from broker.artifacts import FileArtifactStore
from broker.catalog import lookup
from broker.envelope import Envelope
from broker.identity import Identity
from broker.providers import CallContext, LocalProvider
from broker.records import AttemptStatus
from broker.settings import SandboxKind, Settings
from orchestrator.embedded import open_services
from orchestrator.reconcile import reconcile_attempt, sweep
from sandbox.runner import ProcessRunner

SCRIPTS = Path(__file__).parent.parent / "fixtures" / "scripts"
_FORK = multiprocessing.get_context("fork")


def script(name: str) -> str:
    return (SCRIPTS / f"{name}.py").read_text(encoding="utf-8")


class CrashingProvider:
    """Wraps the logged provider and SIGKILLs its own process at a chosen point."""

    def __init__(self, inner: Any, mode: str, at_call: int = 1) -> None:
        self.inner = inner
        self.name = "crashing"
        self.mode = mode
        self.at_call = at_call
        self.calls = 0
        self.lock = threading.Lock()
        self.barrier = threading.Barrier(3)

    def execute(self, capability, payload, call):
        with self.lock:
            self.calls += 1
            crash_here = self.calls >= self.at_call
        if not crash_here:
            return self.inner.execute(capability, payload, call)
        if self.mode == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "barrier":
            self.barrier.wait(timeout=30)
            os.kill(os.getpid(), signal.SIGKILL)
        if self.mode == "sleep":
            time.sleep(600)
        answer = self.inner.execute(capability, payload, call)  # mode "after"
        os.kill(os.getpid(), signal.SIGKILL)
        return answer


def settings_for(home: Path, **overrides: Any) -> Settings:
    return Settings(home=home, sandbox=SandboxKind.PROCESS, **overrides)


def _child(home: Path, run_id: str, name: str, mode: str, at_call: int, latency: float) -> None:
    services = open_services(settings_for(home), runner=ProcessRunner(), latency=latency)
    if mode == "mid-call":  # inside the logged provider: after its intent line
        services.provider.inner = CrashingProvider(services.provider.inner, "before", at_call)
    elif mode != "none":
        services.provider = CrashingProvider(services.provider, mode, at_call)
    services.pipeline().run(run_id, script(name), {}, Envelope()).to_json()
    os._exit(0)


def start_child(home: Path, run_id: str, name: str, *, mode: str = "none", at_call: int = 1,
                latency: float = 0.0) -> multiprocessing.Process:
    proc = _FORK.Process(target=_child, args=(home, run_id, name, mode, at_call, latency))
    proc.start()
    return proc


def run_child(home: Path, run_id: str, name: str, **kwargs: Any) -> int | None:
    proc = start_child(home, run_id, name, **kwargs)
    proc.join(120)
    return proc.exitcode


def provider_lines(home: Path) -> list[dict[str, Any]]:
    from broker.providers import ProviderLog

    return ProviderLog(home / "provider-log.jsonl").read()


def fetch_known_result(home: Path, run_id: str, identity: Identity, capability: str,
                       payload: dict) -> Any:
    """What an operator reads back from a provider that keeps results by idempotency key.

    The local provider is deterministic, so asking it again without logging a
    dispatch stands in for that lookup.
    """
    local = LocalProvider(FileArtifactStore(home / "artifacts"))
    key = "lookup"
    return local.execute(lookup(capability), payload, CallContext(run_id, str(identity),
                                                                   key)).result


def operator_recover(services: Any, home: Path, run_id: str,
                     payloads: dict[str, dict]) -> list[str]:
    """The documented procedure: sweep, then per unresolved attempt write back the result
    the provider completed (its log has the identity) or abandon it (it never ran)."""
    sweep(services.store, services.settings.attempt_lease_seconds)
    done = {(line["run_id"], line["identity"]) for line in provider_lines(home)
            if line["outcome"] == "ok"}
    decisions = []
    for attempt in services.store.list_attempts(run_id,
                                                frozenset({AttemptStatus.UNRESOLVED})):
        ident = str(attempt.identity)
        if (run_id, ident) in done:
            result = fetch_known_result(home, run_id, attempt.identity, attempt.capability,
                                        payloads[ident])
            reconcile_attempt(services.store, run_id, attempt.identity, result=result,
                              operator="ops", reason="provider log shows it completed")
            decisions.append("resolved")
        else:
            reconcile_attempt(services.store, run_id, attempt.identity, operator="ops",
                              reason="provider never received it")
            decisions.append("abandoned")
    return decisions

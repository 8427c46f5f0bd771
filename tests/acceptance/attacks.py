"""The attacks an acceptance run carries: a subset of the corpus (``tests/sandbox/attacks``,
where every attack runs in both sandboxes as a test), by name, run and judged by the
corpus's own harness: host files, secrets, the host's network and sockets, namespaces,
privileges, processes that outlive the run or kill their host, and abuse of the socket
protocol. Each runs with the checker bypassed, except those the checker accepts (they
run on the production path); a normal run right after each must succeed."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from broker.settings import SandboxKind, Settings
from tests.sandbox.attacks import ATTACKS
from tests.sandbox.attacks.corpus import Attack
from tests.sandbox.attacks.harness import ENV_SECRET, SECRET_ENV_NAMES, Canary, Victim, run_attack

Result = tuple[str, bool, str]  # (check name, passed, detail)

ACCEPTANCE = (
    # host files, secrets and memory
    "read-etc-shadow", "read-victim-file", "list-revise-home", "host-environ", "host-mem",
    "write-outside-workdir",
    # the host's network and sockets
    "redis-tcp", "postgres-tcp", "canary-tcp", "docker-socket",
    # namespaces and privileges
    "setns-host-net", "ptrace-attach", "mount-and-chroot", "uid-changes",
    # processes that outlive the run or kill their host
    "fork-bomb", "setsid-daemon", "kill-the-parent",
    # the socket protocol
    "forged-nonce", "site-forgery", "occurrence-replay", "oversized-message", "deep-json",
    "oversized-header", "lone-surrogate", "empty-batch-flood", "half-closed-write",
    "race-branch-unhashable-site", "accepted-lone-surrogate",
)
SLACK = {"docker": 20.0, "process": 10.0}  # seconds past an attack's deadline


def acceptance_attacks() -> list[Attack]:
    by_name = {attack.name: attack for attack in ATTACKS}
    return [by_name[name] for name in ACCEPTANCE]


@contextmanager
def _host_secrets() -> Iterator[None]:
    """The provider keys the host holds while the attacks run (none may leak)."""
    saved = {name: os.environ.get(name) for name in SECRET_ENV_NAMES}
    os.environ.update(dict.fromkeys(SECRET_ENV_NAMES, ENV_SECRET))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_attack_checks(kind: str, settings: Settings | None = None, *,
                      only: str | None = None) -> list[Result]:
    from orchestrator.embedded import open_services
    from sandbox.select import select_runner

    chosen = [a for a in acceptance_attacks() if not only or only in f"{kind} attack: {a.name}"]
    if not chosen:
        return []
    base = settings or Settings()
    results: list[Result] = []
    canary = Canary()
    try:
        with _host_secrets(), tempfile.TemporaryDirectory(prefix="revise-attacks-") as tmp:
            run_settings = base.model_copy(update={
                "home": Path(tmp) / "home", "database_url": None, "sandbox": SandboxKind(kind)})
            services = open_services(run_settings, runner=select_runner(run_settings))
            try:
                for attack in chosen:
                    try:
                        verdict = run_attack(
                            attack, services, checked=attack.checker == "harmless",
                            victim=Victim(Path(tmp) / f"victim-{attack.name}"), canary=canary,
                            slack=SLACK[kind])
                        ok = verdict.contained
                        error = (verdict.report.get("error") or {}).get("type") or ""
                        detail = "; ".join(verdict.problems) or \
                            f"{verdict.report.get('status')} {error}"
                    except Exception as exc:  # a check that crashes is a failed check
                        ok, detail = False, f"{type(exc).__name__}: {exc}"
                    results.append((f"{kind} attack: {attack.name}", ok, detail[:70]))
            finally:
                services.close()
    finally:
        canary.close()
    return results

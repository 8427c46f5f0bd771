"""Crash recovery without the visibility timeout: SIGKILL to `blocked` / resumed, default settings.

Run from the repository root with Redis and PostgreSQL up:
    python bench/crash_recovery.py [--rounds 2]

Each round starts the deployment's roles (``tests.workers.conftest.Stack``: dispatcher,
sandbox, broker, reconciler with beat) with the default settings (attempt lease 30 s,
revision lease 30 s, sweep every 10 s, visibility timeout 3600 s) and measures:

* broker worker SIGKILLed inside a provider call (on this host, and with
  ``--other-host`` one that looks remote, seen only through its lease): time until the run shows
  ``blocked: unresolved attempt at <identity>``, until the sandbox job waiting on the
  call has ended (fail closed), and that the operator can reconcile at once;
* sandbox worker SIGKILLed mid-job, a replacement started at once: time until the
  reconciler resumes the job (``job_resumed``) and until the run has succeeded on the
  replacement, its committed call replayed and each call paid once.

Prints a table (a benchmark, not a test). It creates and drops its own PostgreSQL
database and uses its own queue prefix on Redis (``--redis-url``, by default
``REVISE_BENCH_REDIS_URL`` or db 13).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from peers.revise import redis_url  # noqa: E402
from peers.scratch import PG_ADMIN, scratch_database  # noqa: E402

from broker.envelope import Envelope  # noqa: E402
from broker.records import AttemptStatus  # noqa: E402
from orchestrator.reconcile import reconcile_attempt  # noqa: E402
from tests.workers.conftest import HOST, Stack, script  # noqa: E402

READY_SECONDS = 120


def _poll(predicate: Callable[[], Any], timeout: float, what: str) -> float:
    """Seconds until ``predicate`` holds (polled every 50 ms)."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f} s")
        time.sleep(0.05)
    return time.monotonic() - started


def _detail(stack: Stack, run_id: str) -> str:
    run = stack.store.get_run(run_id)
    return "" if run is None else f"{run.status} ({run.detail or ''})"


def _stop(stack: Stack, proc: Any, name: str, sig: int) -> None:
    os.killpg(proc.pid, sig)
    proc.wait(60)
    stack.names.remove(f"{name}-{stack.prefix}@{HOST}")


def _other_host_broker(stack: Stack, index: int) -> Any:
    """A broker worker that looks like it runs on another host (its own UTS namespace and
    hostname): its death is seen through the attempt lease, not the process table."""
    name = f"capabilities{index}-{stack.prefix}@{HOST}"
    stack.names.append(name)
    celery = (f"{sys.executable} -m celery -A workers.app worker -Q "
              f"{stack.client.app.routing.queue('capabilities')} -n {name} --pool threads "
              "-c 2 -l INFO --without-mingle --without-gossip")
    return stack._spawn(["unshare", "--uts", "sh", "-c",
                         f"hostname revise-bench-other-host && exec {celery}"],
                        f"capabilities{index}", {"REVISE_CELERY_LOCAL_LATENCY": "60"})


def broker_killed(stack: Stack, round_: int, other_host: bool = False) -> dict[str, float]:
    """The only broker worker dies inside the provider call."""
    run_id = f"bench-broker-{round_}{'-remote' if other_host else ''}"
    doomed = (_other_host_broker(stack, 2 * round_) if other_host else
              stack.worker("capabilities", concurrency=2, index=2 * round_,
                           env={"REVISE_CELERY_LOCAL_LATENCY": "60"}))
    stack.wait_ready(READY_SECONDS)
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), run_id)
    # Claimed by the side that asks first; the broker worker takes it just before the
    # request leaves (sent_at): only then is it inside the provider call.
    _poll(lambda: any(a.sent_at for a in stack.store.list_attempts(
        run_id, frozenset({AttemptStatus.PENDING}))), 120, "the attempt taken and sent")
    killed = time.monotonic()
    _stop(stack, doomed, f"capabilities{2 * round_}", signal.SIGKILL)
    _poll(lambda: _detail(stack, run_id).startswith(
        "blocked (blocked: unresolved attempt at"), 120, "blocked")
    blocked = time.monotonic() - killed
    _poll(handle.done, 120, "the sandbox job ending")
    job_ended = time.monotonic() - killed
    report = handle.result()
    assert report["error"]["type"] == "AttemptUnresolved", report["error"]
    decision = reconcile_attempt(stack.store, run_id, "orchestrate/#0@:0", operator="bench",
                                 reason="measured")  # at once: no lease to wait out
    assert decision["decision"] == "abandoned"
    return {"blocked": blocked, "sandbox job ended (fail closed)": job_ended,
            "reconciled by the operator": time.monotonic() - killed}


def sandbox_killed(stack: Stack, round_: int, sandbox: Any) -> tuple[dict[str, float], Any]:
    """The only sandbox worker dies mid-job and a replacement starts at once (as a
    supervisor restarts it); returns the figures and the replacement."""
    run_id = f"bench-sandbox-{round_}"
    broker = stack.worker("capabilities", concurrency=2, index=2 * round_ + 1,
                          env={"REVISE_CELERY_LOCAL_LATENCY": "1.0"})
    stack.wait_ready(READY_SECONDS)
    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), run_id)
    _poll(lambda: stack.store.list_slots(run_id), 120, "the first committed call")
    killed = time.monotonic()
    _stop(stack, sandbox, f"sandbox{round_}", signal.SIGKILL)
    replacement = stack.worker("sandbox", pool="prefork", concurrency=1, index=round_ + 1)
    _poll(lambda: stack.events(run_id, "job_resumed"), 120, "the job resumed")
    resumed = time.monotonic() - killed
    _poll(handle.done, 120, "the resumed job ending")
    finished = time.monotonic() - killed
    report = handle.result()
    assert report["status"] == "succeeded", report
    paid = [entry["identity"] for entry in stack.provider_log() if entry["run_id"] == run_id]
    assert len(paid) == len(set(paid)) == 2, paid  # each call paid once
    _stop(stack, broker, f"capabilities{2 * round_ + 1}", signal.SIGTERM)
    return {"job resumed by the reconciler": resumed,
            "run succeeded, each call paid once": finished}, replacement


def _row(name: str, values: list[float]) -> str:
    return (f"{name:<62} {min(values):7.1f} {statistics.median(values):7.1f} "
            f"{max(values):7.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--other-host", action="store_true", help="also a broker worker "
                        "that looks remote (needs `unshare --uts`, i.e. root): its death is "
                        "seen only through the attempt lease")
    parser.add_argument("--redis-url", default=redis_url())
    options = parser.parse_args()
    figures: dict[str, list[float]] = {}
    with scratch_database(PG_ADMIN, "revise_bench_crash") as url, \
            tempfile.TemporaryDirectory(prefix="revise-bench-crash-") as tmp:
        stack = Stack(Path(tmp), url, options.redis_url, local_latency=0.5)
        try:
            stack.worker("dispatch")
            sandbox = stack.worker("sandbox", pool="prefork", concurrency=1, index=0)
            stack.worker("reconcile", concurrency=1, beat=True)
            for round_ in range(options.rounds):
                for name, value in broker_killed(stack, round_).items():
                    figures.setdefault(f"broker SIGKILL -> {name}", []).append(value)
                found, sandbox = sandbox_killed(stack, round_, sandbox)
                for name, value in found.items():
                    figures.setdefault(f"sandbox SIGKILL -> {name}", []).append(value)
            if options.other_host:
                for name, value in broker_killed(stack, options.rounds, True).items():
                    figures.setdefault(f"other-host broker SIGKILL -> {name}", []
                                       ).append(value)
        finally:
            stack.stop()
    settings = stack.settings
    print(f"\ncrash recovery, default settings: attempt lease "
          f"{settings.attempt_lease_seconds:.0f} s, revision lease "
          f"{settings.revision_lease_seconds:.0f} s, sweep every "
          f"{stack.queue.reconcile_interval:.0f} s, visibility timeout "
          f"{stack.queue.visibility_timeout:.0f} s; {options.rounds} round(s)")
    print(f"{'seconds after SIGKILL':<62} {'min':>7} {'median':>7} {'max':>7}")
    for name, values in figures.items():
        print(_row(name, values))
    bound = 2 * settings.attempt_lease_seconds
    worst = max(v for k, values in figures.items() if k.endswith("-> blocked")
                for v in values)
    print(f"required: blocked within two attempt leases ({bound:.0f} s): "
          f"{'yes' if worst <= bound else 'NO'} (worst {worst:.1f} s)")


if __name__ == "__main__":
    main()

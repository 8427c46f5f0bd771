"""Pre-started sandboxes: one per job, never reused across runs; for every runner kind.

Starting a sandbox dominates a short job (hundreds of milliseconds for a
container before the first RPC). A warm sandbox is launched ahead of time the
way a cold one is, with its own RPC directory and listener; its runtime
connects at once and blocks until the host's ``job`` message arrives. A run
whose limits equal the pool's claims one: the run gets the warm sandbox's
directory, listener and sandbox (``Launched``), and the pool starts a
replacement. After its job the sandbox is cleaned up like any other.

The pool's own thread keeps it full and replaces warm sandboxes that died
while idle (a claim also skips dead ones). Policy and isolation are exactly the
cold path's: the pool calls the runner's own cold launch.

The pool's own thread starts them (a sandbox may die with the thread that
started it: ``--die-with-parent`` follows the parent thread), and ``close`` ends
them; close the runner after its runs.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

from broker.envelope import SandboxLimits
from sandbox.job import SandboxJob, remove_rpc_dir
from sandbox.launch import Launched

log = logging.getLogger("revise.sandbox.warm")

WARM_RUN = "warm-pool"
ColdLaunch = Callable[[str, Path, SandboxLimits], Launched]


class WarmLaunches(ABC):
    """A runner's launch: a warm sandbox for the job's limits if one is ready, else the
    runner's cold launch (``_launch_cold``); ``close`` ends the idle warm ones."""

    _pool: WarmPool | None = None

    def _keep_warm(self, size: int, limits: SandboxLimits | None) -> None:
        self._pool = WarmPool(self._launch_cold, size, limits) if size > 0 else None

    def launch(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        if self._pool is not None:
            warm = self._pool.claim(run_id, limits)
            if warm is not None:
                return warm
        return self._launch_cold(run_id, rpc_dir, limits)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()

    @abstractmethod
    def _launch_cold(self, run_id: str, rpc_dir: Path, limits: SandboxLimits) -> Launched:
        """Start a sandbox for the job now (the pool's warm ones start this way too)."""


class WarmPool:
    def __init__(self, launch_cold: ColdLaunch, size: int,
                 limits: SandboxLimits | None = None, *, check_interval: float = 5.0) -> None:
        """``launch_cold(run_id, rpc_dir, limits)`` is the runner's cold launch."""
        self._launch_cold = launch_cold
        self.size = size
        self.limits = limits or SandboxLimits()
        self._check_interval = check_interval
        self._root = Path(tempfile.mkdtemp(prefix="revise-warm-"))
        self._ready: list[Launched] = []
        self._wake = threading.Condition()
        self._counter = 0
        self._closed = False
        self._thread = threading.Thread(target=self._keep_full, daemon=True,
                                        name="revise-warm-pool")
        self._thread.start()

    def claim(self, run_id: str, limits: SandboxLimits) -> Launched | None:
        """A live pre-started sandbox for a job with these limits, or None (start cold)."""
        if limits != self.limits:
            return None
        while True:
            with self._wake:
                if not self._ready:
                    self._wake.notify()
                    return None
                warm = self._ready.pop(0)
                self._wake.notify()  # start a replacement
            if warm.sandbox.wait(0) is None:
                job = SandboxJob(run_id, warm.job.rpc_dir, limits)
                return dataclasses.replace(warm, job=job)
            log.warning("a warm sandbox died while idle; discarding it")
            _discard(warm)

    def ready(self) -> int:
        with self._wake:
            return len(self._ready)

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify_all()
        self._thread.join(60)
        with self._wake:
            idle, self._ready = self._ready, []
        for warm in idle:
            _discard(warm)
        shutil.rmtree(self._root, ignore_errors=True)

    def _keep_full(self) -> None:
        while True:
            with self._wake:
                if self._closed:
                    return
                missing = self.size - len(self._ready)
                if missing <= 0:
                    self._wake.wait(self._check_interval)
            self._replace_dead()
            if missing > 0 and not self._add_one():
                with self._wake:  # the engine hiccuped: cold starts still work; retry later
                    self._wake.wait(self._check_interval)

    def _add_one(self) -> bool:
        with self._wake:
            self._counter += 1
            rpc_dir = self._root / f"w{self._counter}"
        try:
            warm = self._launch_cold(WARM_RUN, rpc_dir, self.limits)
        except Exception:
            log.warning("could not pre-start a warm sandbox", exc_info=True)
            return False
        with self._wake:
            if not self._closed:
                self._ready.append(warm)
                return True
        _discard(warm)
        return True

    def _replace_dead(self) -> None:
        with self._wake:
            ready = list(self._ready)
        died = {id(warm) for warm in ready if warm.sandbox.wait(0) is not None}
        if not died:
            return
        with self._wake:  # only those still idle: a claim may have taken one meanwhile
            dead = [warm for warm in self._ready if id(warm) in died]
            self._ready = [warm for warm in self._ready if id(warm) not in died]
        for warm in dead:
            log.warning("a warm sandbox died while idle; replacing it")
            _discard(warm)


def _discard(warm: Launched) -> None:
    try:
        warm.sandbox.cleanup()
    finally:
        warm.listener.close()
        remove_rpc_dir(warm.job.rpc_dir)

"""Pre-started sandbox containers: one per job, never reused across runs.

Container start dominates a short job (hundreds of milliseconds before the
first RPC). A warm container is created and started ahead of time with an
empty job directory; its runtime waits for the host's ``go`` file. A run
claims one (its job directory and RPC directory become the run's), the host
writes the job and says go, and the pool starts a replacement in the
background. After its job the container is removed like any other.

Only jobs whose sandbox limits equal the pool's get a warm container; any other
job starts cold. Policy and isolation are exactly the cold path's: the same
profile, image pin check and mounts.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.envelope import SandboxLimits
from sandbox.runner import SandboxJob

log = logging.getLogger("revise.sandbox.warm")

WARM_RUN = "warm-pool"


@dataclass
class _Warm:
    job: SandboxJob
    sandbox: Any


class WarmPool:
    def __init__(self, cold_start: Any, size: int, limits: SandboxLimits | None = None
                 ) -> None:
        """``cold_start(job)`` starts a container for ``job`` (DockerRunner's cold path)."""
        self._cold_start = cold_start
        self.size = size
        self.limits = limits or SandboxLimits()
        self._root = Path(tempfile.mkdtemp(prefix="revise-warm-"))
        self._ready: list[_Warm] = []
        self._claimed: dict[Path, _Warm] = {}
        self._lock = threading.Lock()
        self._counter = 0
        self._closed = False
        self._filler: threading.Thread | None = None
        self.fill()

    def _new(self) -> _Warm | None:
        with self._lock:
            self._counter += 1
            base = self._root / f"w{self._counter}"
        job = SandboxJob(WARM_RUN, base / "job", base / "rpc", self.limits)
        job.job_dir.mkdir(parents=True)
        job.rpc_dir.mkdir()
        try:
            return _Warm(job, self._cold_start(job))
        except Exception:  # the engine hiccuped: cold starts still work
            log.warning("could not pre-start a warm sandbox", exc_info=True)
            shutil.rmtree(base, ignore_errors=True)
            return None

    def fill(self) -> None:
        while not self._closed and len(self._ready) < self.size:
            warm = self._new()
            if warm is None:
                return
            with self._lock:
                self._ready.append(warm)

    def claim(self, limits: SandboxLimits) -> SandboxJob | None:
        """A pre-started sandbox's directories for a job with these limits, or None."""
        if limits != self.limits:
            return None
        with self._lock:
            if not self._ready:
                return None
            warm = self._ready.pop(0)
            self._claimed[warm.job.job_dir] = warm
            if self._filler is None or not self._filler.is_alive():
                self._filler = threading.Thread(target=self.fill, daemon=True,
                                                name="revise-warm-fill")
                self._filler.start()
        return warm.job

    def go(self, job: SandboxJob) -> Any | None:
        """Hand a claimed sandbox its job (already written into its directories)."""
        with self._lock:
            warm = self._claimed.pop(Path(job.job_dir), None)
        if warm is None:
            return None
        go = Path(job.rpc_dir) / "go"
        go.write_text("go")
        go.chmod(0o644)
        return warm.sandbox

    def close(self) -> None:
        self._closed = True
        if self._filler is not None:
            self._filler.join(60)
        with self._lock:
            idle, self._ready = self._ready, []
        for warm in idle:
            warm.sandbox.cleanup()
        shutil.rmtree(self._root, ignore_errors=True)

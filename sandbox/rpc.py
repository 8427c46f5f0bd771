"""Host side of the bounded file RPC.

The sandbox writes ``req-N.json`` frames into the run's RPC directory; the
host admits a frame only if it carries the run's nonce, names a whitelisted
site (the host's own annotation) as the right kind of call, has the next
occurrence the host expects for (site, path), fits the size cap, and keeps
the number of outstanding calls within the envelope's concurrency. Anything
else stops the run. Admitted frames go to ``handler`` (the runtime rule) on a
thread pool; its answer is written back as ``resp-N.json`` (temp + rename).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from broker.errors import ReviseError, RpcViolation, SandboxTimeout
from sandbox.runner import Sandbox

log = logging.getLogger("revise.rpc")

FRAME_KINDS = frozenset({"call", "race_lookup", "race_commit"})
_EXIT_POLL = 0.1


@dataclass(frozen=True)
class Frame:
    seq: int
    kind: str
    site: str
    path: tuple[int, ...]
    occurrence: int
    capability: str | None
    payload: Any
    extra: dict[str, Any]


Handler = Callable[[Frame], dict[str, Any]]


@dataclass
class ServeResult:
    exit_code: int | None
    outcome: dict[str, Any] | None
    stop: ReviseError | None = None
    timed_out: bool = False
    frames: int = 0
    violations: list[str] = field(default_factory=list)


class RpcServer:
    def __init__(self, rpc_dir: Path, *, nonce: str, whitelist: dict[str, str],
                 handler: Handler, concurrency: int, frame_bytes: int,
                 output_bytes: int) -> None:
        """``whitelist`` maps each annotated site to its capability ("ctx.race" for races)."""
        self.rpc_dir = rpc_dir
        self.nonce = nonce
        self.whitelist = whitelist
        self.handler = handler
        self.concurrency = concurrency
        self.frame_bytes = frame_bytes
        self.output_bytes = output_bytes
        self._expected: dict[tuple[str, tuple[int, ...]], int] = {}
        self._races_open: set[tuple[str, tuple[int, ...], int]] = set()
        self._seen: set[int] = set()
        self._outstanding: set[int] = set()
        self._lock = threading.Lock()
        self.stop: ReviseError | None = None
        self.frames = 0

    # ---- admission ----------------------------------------------------------------------

    def _violation(self, message: str, **fields: Any) -> RpcViolation:
        return RpcViolation(f"sandbox RPC refused: {message}; the run is stopped", **fields)

    def _parse(self, path: Path) -> Frame:
        size = path.stat().st_size
        if size > self.frame_bytes:
            raise self._violation(f"{path.name} is {size} bytes (limit {self.frame_bytes})")
        try:
            raw = json.loads(path.read_bytes())
        except (ValueError, UnicodeDecodeError):
            raise self._violation(f"{path.name} is not a JSON frame") from None
        if not isinstance(raw, dict) or raw.get("nonce") != self.nonce:
            raise self._violation(f"{path.name} does not carry this run's nonce")
        seq, kind = raw.get("seq"), raw.get("kind")
        site, frame_path, occ = raw.get("site"), raw.get("path"), raw.get("occurrence")
        if (not isinstance(seq, int) or kind not in FRAME_KINDS or not isinstance(site, str)
                or not isinstance(frame_path, list)
                or not all(isinstance(i, int) and i >= 0 for i in frame_path)
                or not isinstance(occ, int)):
            raise self._violation(f"{path.name} is malformed")
        if path.name != f"req-{seq:08d}.json" or seq in self._seen:
            raise self._violation(f"frame {seq} is replayed or misnamed")
        extra = {k: v for k, v in raw.items() if k not in {
            "v", "seq", "nonce", "kind", "site", "path", "occurrence", "capability", "payload"}}
        return Frame(seq, kind, site, tuple(frame_path), occ, raw.get("capability"),
                     raw.get("payload"), extra)

    def _admit(self, frame: Frame) -> None:
        expected_capability = self.whitelist.get(frame.site)
        if expected_capability is None:
            raise self._violation(f"site {frame.site!r} is not in the host's annotation",
                                  site=frame.site)
        is_race = frame.kind != "call"
        if is_race != (expected_capability == "ctx.race"):
            raise self._violation(f"site {frame.site} does not make {frame.kind} frames",
                                  site=frame.site)
        if not is_race and frame.capability != expected_capability:
            raise self._violation(
                f"site {frame.site} is annotated for {expected_capability}, the frame asks for "
                f"{frame.capability}", site=frame.site)
        key = (frame.site, frame.path)
        race_key = (frame.site, frame.path, frame.occurrence)
        if frame.kind == "race_commit":
            if race_key not in self._races_open:
                raise self._violation(f"race at {frame.site} committed without a lookup")
            self._races_open.discard(race_key)
        else:
            if frame.occurrence != self._expected.get(key, 0):
                raise self._violation(
                    f"occurrence {frame.occurrence} at {frame.site} path {list(frame.path)}; "
                    f"the host expects {self._expected.get(key, 0)}", site=frame.site)
            self._expected[key] = frame.occurrence + 1
            if frame.kind == "race_lookup":
                self._races_open.add(race_key)
        with self._lock:
            if len(self._outstanding) >= self.concurrency:
                raise self._violation(
                    f"more than {self.concurrency} outstanding calls (envelope concurrency)")

    # ---- serving ------------------------------------------------------------------------

    def _respond(self, seq: int, body: dict[str, Any]) -> None:
        tmp = self.rpc_dir / f".tmp-resp-{seq:08d}.json"
        tmp.write_text(json.dumps(body, separators=(",", ":"), allow_nan=False))
        os.replace(tmp, self.rpc_dir / f"resp-{seq:08d}.json")

    def _handle(self, frame: Frame) -> None:
        try:
            body = self.handler(frame)
        except ReviseError as exc:  # the handler's safety stops arrive here as errors
            self.stop = self.stop or exc
            body = {"stop": exc.to_json()}
        except Exception as exc:  # fail closed on anything unexpected
            log.exception("handler failed for frame %s at %s", frame.seq, frame.site)
            self.stop = self.stop or RpcViolation(f"host handler failed: {exc}",
                                                  site=frame.site)
            body = {"stop": self.stop.to_json()}
        if "stop" in body and self.stop is None:
            self.stop = RpcViolation(body["stop"].get("message", "stopped"))
        self._done(frame.seq)  # before the answer: the sandbox may send its next call at once
        self._respond(frame.seq, body)

    def _pending_requests(self) -> list[Path]:
        names = os.listdir(self.rpc_dir)
        if len(names) > self.concurrency * 4 + 16:  # a script filling the host's disk
            raise self._violation(f"{len(names)} files in the RPC directory; only frames "
                                  "belong there")
        return [self.rpc_dir / n for n in sorted(names) if n.startswith("req-")]

    def _pump(self, pool: ThreadPoolExecutor) -> None:
        try:
            pending = self._pending_requests()
        except RpcViolation as exc:
            self.stop = self.stop or exc
            return
        for path in pending:
            try:
                frame = self._parse(path)
                self._admit(frame)
            except RpcViolation as exc:
                self.stop = self.stop or exc
                path.unlink(missing_ok=True)
                return
            path.unlink(missing_ok=True)
            self._seen.add(frame.seq)
            self.frames += 1
            with self._lock:
                self._outstanding.add(frame.seq)
            pool.submit(self._handle, frame)

    def _done(self, seq: int) -> None:
        with self._lock:
            self._outstanding.discard(seq)

    def serve(self, sandbox: Sandbox, timeout: float) -> ServeResult:
        deadline = time.monotonic() + timeout
        inotify = INotify()
        inotify.add_watch(str(self.rpc_dir), inotify_flags.MOVED_TO | inotify_flags.CLOSE_WRITE)
        exit_code: int | None = None
        timed_out = False
        try:
            with ThreadPoolExecutor(max_workers=max(1, self.concurrency),
                                    thread_name_prefix="revise-call") as pool:
                next_exit_check = 0.0
                while True:
                    self._pump(pool)
                    if self.stop is not None:
                        break
                    now = time.monotonic()
                    # Asking a runner whether the sandbox exited can cost a Docker API call:
                    # do it when the result is written, else only every _EXIT_POLL seconds.
                    finished = (self.rpc_dir / "result.json").exists()
                    if finished or now >= next_exit_check:
                        exit_code = sandbox.wait(1 if finished else 0)
                        next_exit_check = now + _EXIT_POLL
                        if exit_code is not None:
                            self._pump(pool)  # frames written just before exit
                            break
                    if now > deadline:
                        timed_out = True
                        break
                    inotify.read(timeout=20)  # milliseconds; wakes on the next frame
                # Calls already admitted finish and commit: they may have been paid for.
            if self.stop is not None or timed_out:
                sandbox.kill()
                exit_code = sandbox.wait(10)
        finally:
            inotify.close()
        outcome = self._read_outcome()
        stop = self.stop
        if timed_out and stop is None:
            stop = SandboxTimeout(f"the script ran longer than {timeout:.0f} s and was killed; "
                                  "raise the envelope's sandbox.timeout_seconds or do less work")
        return ServeResult(exit_code, outcome, stop, timed_out, self.frames)

    def _read_outcome(self) -> dict[str, Any] | None:
        path = self.rpc_dir / "result.json"
        try:
            if path.stat().st_size > self.output_bytes + 4096:
                return None
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

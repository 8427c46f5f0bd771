"""The script runtime that runs inside the sandbox (container or child process).

Standard library only: this file is the whole of what the sandbox image
carries. It executes the host-annotated script with a small builtins table
and turns every ``ctx.run`` into a request frame on the RPC directory; the
host decides (replay, execute, stop) and answers with a response frame.

Usage: python3 -I -S -B runtime.py JOB_DIR RPC_DIR
  JOB_DIR/script.py    the annotated script (exactly the text the host checked)
  JOB_DIR/args.json    the script's args
  JOB_DIR/config.json  {"concurrency", "frame_bytes", "output_bytes", "log_lines"}
  RPC_DIR/nonce        per-run nonce; read once and removed
  RPC_DIR/req-N.json   request frames (written atomically: temp file + rename)
  RPC_DIR/resp-N.json  response frames from the host
  RPC_DIR/result.json  the final outcome
  RPC_DIR/go           written by the host when a pre-started (warm) sandbox gets its job
"""

import asyncio
import contextvars
import json
import os
import sys
import threading
import time

_PATH = contextvars.ContextVar("revise_fanout_path", default=())


class CapabilityError(Exception):
    """A provider rejected or failed a call. Scripts may catch it by name."""

    def __init__(self, message, code=None, capability=None, identity=None, status=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.capability = capability
        self.identity = identity
        self.status = status


class ScriptStopped(BaseException):
    """The host ended the run (divergence, denial, budget, ...). Not catchable by scripts."""


_IN_MOVED_TO = 0x00000080
_IN_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000


def _inotify(rpc_dir):
    """An inotify fd watching for answers, or None (then we poll)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK_CLOEXEC)
        if fd < 0:
            return None
        if libc.inotify_add_watch(fd, rpc_dir.encode(), _IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return fd
    except (ImportError, OSError, AttributeError):
        return None


class _Transport:
    def __init__(self, rpc_dir, nonce, frame_bytes):
        self.rpc_dir = rpc_dir
        self.nonce = nonce
        self.frame_bytes = frame_bytes
        self.seq = 0
        self.stopped = None
        self._waiting = {}
        self._fd = _inotify(rpc_dir)
        self._reader = False

    def _write(self, name, data):
        tmp = os.path.join(self.rpc_dir, ".tmp-" + name)
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(data)
        os.rename(tmp, os.path.join(self.rpc_dir, name))

    def _answer_path(self, seq):
        return os.path.join(self.rpc_dir, f"resp-{seq:08d}.json")

    def _wake(self):
        """An answer landed (or a poll tick): resolve every waiter whose answer exists."""
        if self._fd is not None:
            try:
                while os.read(self._fd, 65536):
                    pass
            except BlockingIOError:
                pass
        for seq, future in list(self._waiting.items()):
            if not future.done() and os.path.exists(self._answer_path(seq)):
                future.set_result(None)

    async def _answer(self, seq):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self._waiting[seq] = future
        if self._fd is not None and not self._reader:
            loop.add_reader(self._fd, self._wake)
            self._reader = True
        delay = 0.0002
        try:
            while not os.path.exists(self._answer_path(seq)):
                # inotify wakes us at once; the timeout is only a safety net (and the
                # whole mechanism where inotify is unavailable).
                await asyncio.wait([future], timeout=delay if self._fd is None else 0.05)
                delay = min(delay * 1.5, 0.002)
        finally:
            del self._waiting[seq]

    async def call(self, frame):
        if self.stopped is not None:
            raise ScriptStopped(self.stopped)
        self.seq += 1
        seq = self.seq
        frame = dict(frame, v=1, seq=seq, nonce=self.nonce)
        data = json.dumps(frame, allow_nan=False, separators=(",", ":"))
        if len(data.encode("utf-8")) > self.frame_bytes:
            raise ValueError(
                f"capability payload is {len(data)} bytes; the frame limit is "
                f"{self.frame_bytes}: pass references to artifacts instead of large data")
        self._write(f"req-{seq:08d}.json", data)
        await self._answer(seq)
        response_path = self._answer_path(seq)
        with open(response_path, encoding="utf-8") as fh:
            response = json.load(fh)
        os.unlink(response_path)
        if "stop" in response:
            self.stopped = response["stop"].get("message", "run stopped by the host")
            raise ScriptStopped(self.stopped)
        return response


def _branch(coro, path):
    context = contextvars.copy_context()
    context.run(_PATH.set, path)
    return asyncio.get_running_loop().create_task(coro, context=context)


def _first_failure(outcomes):
    for outcome in outcomes:
        if isinstance(outcome, ScriptStopped):
            return outcome
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            return outcome
    return None


def _close_all(items):
    for item in items:
        if asyncio.iscoroutine(item):
            item.close()


def _check_awaitables(name, items):
    if not isinstance(items, list | tuple):
        raise TypeError(f"ctx.{name} takes a list of calls, got {type(items).__name__}")
    for item in items:
        if not asyncio.iscoroutine(item):
            _close_all(items)
            raise TypeError(f"ctx.{name} takes a list of calls (coroutines); got "
                            f"{type(item).__name__}: call the function, do not await it first")
    return list(items)


class Context:
    """The ``ctx`` a script receives."""

    def __init__(self, transport, concurrency, log_lines):
        self._transport = transport
        self._occurrences = {}
        self._slots = asyncio.Semaphore(concurrency)
        self._log_lines = log_lines
        self.logs = []

    def _next_occurrence(self, site, path):
        key = (site, path)
        occurrence = self._occurrences.get(key, 0)
        self._occurrences[key] = occurrence + 1
        return occurrence

    async def run(self, capability, payload, *, _site=None):
        if not isinstance(_site, str):
            raise ScriptStopped("capability call without a host annotation")
        path = _PATH.get()
        occurrence = self._next_occurrence(_site, path)
        try:
            json.dumps(payload, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload for {capability} is not JSON: {exc}") from None
        frame = {"kind": "call", "site": _site, "path": list(path), "occurrence": occurrence,
                 "capability": capability, "payload": payload}
        async with self._slots:
            response = await self._transport.call(frame)
        if response.get("ok"):
            return response.get("result")
        error = response.get("error") or {}
        raise CapabilityError(error.get("message", "capability call failed"),
                              code=error.get("code"), capability=capability,
                              identity=error.get("identity"), status=error.get("status"))

    async def parallel(self, calls):
        """Every branch runs to completion; then the first failure (by index) is raised."""
        calls = _check_awaitables("parallel", calls)
        base = _PATH.get()
        tasks = [_branch(c, (*base, i)) for i, c in enumerate(calls)]
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failure = _first_failure(outcomes)
        if failure is not None:
            raise failure
        return list(outcomes)

    async def pipeline(self, stages, initial=None):
        if not isinstance(stages, list | tuple):
            raise TypeError("ctx.pipeline takes a list of stage functions")
        base = _PATH.get()
        value = initial
        for i, stage in enumerate(stages):
            value = await _branch(stage(value), (*base, i))
        return value

    async def dag(self, nodes):
        if not isinstance(nodes, dict):
            raise TypeError("ctx.dag takes a dict name -> (async function, [dependencies])")
        order = list(nodes)
        for name, spec in nodes.items():
            if not (isinstance(spec, list | tuple) and len(spec) == 2):
                raise TypeError(f"ctx.dag node {name!r} must be (function, [dependencies])")
            for dep in spec[1]:
                if dep not in nodes:
                    raise ValueError(f"ctx.dag node {name!r} depends on unknown node {dep!r}")
        _check_acyclic(nodes)
        base = _PATH.get()
        tasks = {}

        async def node(name):
            fn, deps = nodes[name]
            inputs = {}
            for dep in deps:
                inputs[dep] = await tasks[dep]
            return await fn(inputs)

        for i, name in enumerate(order):
            tasks[name] = _branch(node(name), (*base, i))
        outcomes = await asyncio.gather(*tasks.values(), return_exceptions=True)
        failure = _first_failure(outcomes)
        if failure is not None:
            raise failure
        return dict(zip(order, outcomes, strict=True))

    async def race(self, calls, *, _site=None):
        """First branch to succeed wins; the host records the winner so replay picks it again."""
        calls = _check_awaitables("race", calls)
        if not isinstance(_site, str):
            _close_all(calls)
            raise ScriptStopped("race without a host annotation")
        base = _PATH.get()
        identity = {"site": _site, "path": list(base),
                    "occurrence": self._next_occurrence(_site, base)}
        async with self._slots:
            decided = await self._transport.call(
                dict(identity, kind="race_lookup", branches=len(calls)))
        winner = (decided.get("result") or {}).get("winner")
        if isinstance(winner, int) and 0 <= winner < len(calls):
            _close_all(c for i, c in enumerate(calls) if i != winner)
            return await _branch(calls[winner], (*base, winner))
        tasks = [_branch(c, (*base, i)) for i, c in enumerate(calls)]
        winner, value = await _first_success(tasks)
        async with self._slots:
            await self._transport.call(dict(identity, kind="race_commit", winner=winner))
        return value

    def log(self, *parts):
        if len(self.logs) < self._log_lines:
            self.logs.append(" ".join(str(p) for p in parts)[:2000])


async def _first_success(tasks):
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in sorted(done, key=tasks.index):
            if not task.cancelled() and task.exception() is None:
                for other in pending:
                    other.cancel()
                return tasks.index(task), task.result()
            if isinstance(task.exception(), ScriptStopped):
                raise task.exception()
    raise _first_failure([t.exception() for t in tasks])


def _check_acyclic(nodes):
    state = {}
    for start in nodes:
        stack = [(start, iter(nodes[start][1]))]
        state[start] = 1
        while stack:
            name, deps = stack[-1]
            dep = next(deps, None)
            if dep is None:
                state[name] = 2
                stack.pop()
            elif state.get(dep) == 1:
                raise ValueError(f"ctx.dag has a cycle through {dep!r}")
            elif dep not in state:
                state[dep] = 1
                stack.append((dep, iter(nodes[dep][1])))


_SAFE_BUILTINS = (
    "abs all any bool dict enumerate float int isinstance len list max min range reversed "
    "round sorted str sum tuple zip True False None ValueError RuntimeError KeyError "
    "IndexError TypeError ZeroDivisionError Exception"
).split()


def _builtins(ctx_logs):
    import builtins

    table = {name: getattr(builtins, name) for name in _SAFE_BUILTINS}
    table["CapabilityError"] = CapabilityError
    table["print"] = lambda *parts, **_: ctx_logs(*parts)
    return table


def _write_result(rpc_dir, outcome, limit):
    data = json.dumps(outcome, allow_nan=False, separators=(",", ":"), default=repr)
    if len(data.encode("utf-8")) > limit:
        data = json.dumps({"ok": False, "logs": outcome.get("logs", [])[:20], "error": {
            "type": "OutputTooLarge",
            "message": f"script result is {len(data)} bytes; the limit is {limit}: "
                       "return artifact references, not contents"}})
    tmp = os.path.join(rpc_dir, ".tmp-result.json")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
    os.rename(tmp, os.path.join(rpc_dir, "result.json"))


def _error_of(exc):
    if isinstance(exc, CapabilityError):
        return {"type": "CapabilityError", "message": exc.message, "code": exc.code,
                "capability": exc.capability, "identity": exc.identity, "status": exc.status}
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "script.py":
            line = tb.tb_lineno
        tb = tb.tb_next
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "line": line}


def _start_watchdog(seconds):
    """Exit on our own if the host is gone and nobody kills us (no orphan waits forever)."""
    timer = threading.Timer(seconds, os._exit, args=(3,))
    timer.daemon = True
    timer.start()


def _wait_for_job(rpc_dir, idle_seconds):
    """A warm sandbox starts before its job exists: wait for the host's ``go``."""
    go = os.path.join(rpc_dir, "go")
    deadline = time.monotonic() + idle_seconds
    while not os.path.exists(go):
        if time.monotonic() > deadline:
            os._exit(4)  # never claimed: the pool replaces us
        time.sleep(0.002)


def main(job_dir, rpc_dir):
    if not os.path.exists(os.path.join(job_dir, "config.json")):
        _wait_for_job(rpc_dir, 900)
    with open(os.path.join(job_dir, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    nonce_path = os.path.join(rpc_dir, "nonce")
    with open(nonce_path, encoding="utf-8") as fh:
        nonce = fh.read().strip()
    os.unlink(nonce_path)
    with open(os.path.join(job_dir, "script.py"), encoding="utf-8") as fh:
        source = fh.read()
    with open(os.path.join(job_dir, "args.json"), encoding="utf-8") as fh:
        args = json.load(fh)
    _start_watchdog(float(config.get("deadline_seconds", 3600)))
    transport = _Transport(rpc_dir, nonce, int(config.get("frame_bytes", 1 << 20)))
    output_limit = int(config.get("output_bytes", 1 << 20))
    outcome = asyncio.run(_run(source, args, transport, config))
    _write_result(rpc_dir, outcome, output_limit)


async def _run(source, args, transport, config):
    ctx = Context(transport, int(config.get("concurrency", 4)), int(config.get("log_lines", 200)))
    namespace = {"__builtins__": _builtins(ctx.log), "__name__": "script"}
    started = time.monotonic()
    try:
        exec(compile(source, "script.py", "exec"), namespace)
        orchestrate = namespace.get("orchestrate")
        if orchestrate is None:
            raise RuntimeError("the script defines no orchestrate(ctx, args)")
        value = await orchestrate(ctx, args)
        json.dumps(value, allow_nan=False)
        return {"ok": True, "result": value, "logs": ctx.logs,
                "seconds": time.monotonic() - started}
    except ScriptStopped as stop:
        return {"ok": False, "stopped": True, "logs": ctx.logs,
                "error": {"type": "ScriptStopped", "message": str(stop)}}
    except Exception as exc:
        return {"ok": False, "logs": ctx.logs, "error": _error_of(exc)}


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

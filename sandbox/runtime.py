"""The script runtime that runs inside the sandbox (container or bubblewrap).

Standard library only: this file and ``language.py`` are the whole of what the
sandbox carries. Usage::

    python3 -I -S -B runtime.py /rpc/rpc.sock

The runtime connects to the host's socket, receives its job (script, args,
config), executes the host-annotated script on its own small scheduler, and
turns every ``ctx.run`` into a call frame. Every frame issued before the
scheduler runs out of runnable tasks travels to the host in one batch, so the
first calls of all the branches of a fanout reach the host together (a wave)
and are decided together. The host answers each frame, or stops the run.

There is no asyncio here: a script's awaitables are opaque objects that can
only be awaited or handed to ``ctx.parallel`` / ``pipeline`` / ``dag`` /
``race``. No future, task or event loop exists to be reached.
"""

# The C modules under socket, collections and json (see ``_c_json``): those packages
# import enum, re and functools, about 10 ms of CPU of every job's start, for nothing
# the runtime uses.
import _socket
import os
import sys
import time
import types
from _collections import deque

if not __package__:  # run as the sandbox runs it: a file beside language.py
    # -I leaves the script's own directory off sys.path; language.py sits beside us.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import language
else:  # imported as sandbox.runtime on the host (tests, the builtins proof)
    from sandbox import language

_HEADER_BYTES = 4  # a message's length, big-endian
_LIMITS = language.LIMITS  # what the host accepts; the runtime stays within it


class CapabilityError(Exception):
    """A provider rejected or failed a call. Scripts may catch it by name."""

    def __init__(self, message, code=None, capability=None, identity=None, status=None,
                 charged=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.capability = capability
        self.identity = identity
        self.status = status
        self.charged = charged  # "maybe": the provider may have charged; "no": it did not


class ScriptStopped(BaseException):
    """The host ended the run. A BaseException: scripts catch only named errors."""


# ---- the channel to the host -------------------------------------------------------------


def _not_json(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


class _Scanning:
    """What CPython's C JSON scanner reads off a decoder: json.loads's defaults."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


def _c_json():
    """CPython's C JSON codec, or (None, None) where it differs: then the json package."""
    try:
        import _json

        _json.make_encoder({}, _not_json, _json.encode_basestring_ascii, None, ":", ",",
                           False, False, False)
        return _json, _json.make_scanner(_Scanning)
    except (ImportError, AttributeError, TypeError):
        return None, None


_JSON, _SCAN = _c_json()


def dumps(value):
    """``json.dumps(value, allow_nan=False, separators=(",", ":"))``: the same text, and
    the same TypeError or ValueError for what is not JSON."""
    if _JSON is None:
        import json

        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    encode = _JSON.make_encoder({}, _not_json, _JSON.encode_basestring_ascii, None, ":", ",",
                                False, False, False)
    return "".join(encode(value, 0))


def loads(data):
    """``json.loads`` of one UTF-8 message from the host."""
    if _SCAN is None:
        import json

        return json.loads(data)
    text = data.decode("utf-8").strip(" \t\n\r")
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        raise ValueError("the host's message is not JSON") from None
    if end != len(text):
        raise ValueError("the host's message has data after its JSON value")
    return value


class _Channel:
    def __init__(self, path, connect_seconds=10.0):
        self._sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        deadline = time.monotonic() + connect_seconds
        while True:
            try:
                self._sock.connect(path)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)
        self._buffer = bytearray()

    def send(self, message):
        data = dumps(message).encode("utf-8")
        self._sock.sendall(len(data).to_bytes(_HEADER_BYTES, "big") + data)

    def _read(self, size):
        while len(self._buffer) < size:
            chunk = self._sock.recv(max(65536, size - len(self._buffer)))
            if not chunk:
                raise ScriptStopped("the host closed the connection")
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    def receive(self):
        size = int.from_bytes(self._read(_HEADER_BYTES), "big")
        return loads(self._read(size))


# ---- awaitables a script holds (opaque: no public attributes) ----------------------------

_OP_CALL, _OP_FANOUT, _OP_JOIN, _OP_RACE = "call", "fanout", "join", "race"


class _Call:
    """What ``ctx.run(...)`` returns: awaiting it sends one call frame."""

    __slots__ = ("_awaited", "_capability", "_payload", "_site", "_take")

    def __init__(self, capability, payload, take, site):
        self._capability = capability
        self._payload = payload
        self._take = take
        self._site = site
        self._awaited = False

    def __await__(self):
        if self._awaited:
            raise RuntimeError("a ctx.run(...) call can be awaited only once; call it again")
        self._awaited = True
        return (yield (_OP_CALL, self))


class _At:
    """A helper's coroutine, tagged by the host with the call sites that lead to it.

    The chain is taken where the helper call is *written* (the task's chain when
    the host's ``__at__("site", helper(...))`` tag is evaluated, plus the site), and
    set while the coroutine runs, wherever and by whichever task it is awaited:
    a call's site is where it stands in the source, as the host's site table says.
    """

    __slots__ = ("_chain", "_coro")

    def __init__(self, chain, coro):
        self._chain = chain
        self._coro = coro

    @classmethod
    def tagged(cls, site, coro):
        return cls((*_current_chain(), site), coro)

    def __await__(self):
        task = _SCHEDULER.current
        saved = task.chain
        task.chain = list(self._chain)
        try:
            return (yield from _awaitable_iter(self._coro))
        finally:
            task.chain = saved


class _Fn:
    """A helper handed over as a value (``__fn__(helper)``): calls of it run on the chain
    where it was handed over, as the host's site table says."""

    __slots__ = ("_chain", "_fn")

    def __init__(self, fn):
        self._chain = _current_chain()
        self._fn = fn

    def __call__(self, *args):
        return _At(self._chain, self._fn(*args))


def _current_chain():
    current = _SCHEDULER.current
    return tuple(current.chain) if current is not None else ()


class _Fanout:
    """What ``ctx.parallel`` / ``pipeline`` / ``dag`` return."""

    __slots__ = ("_awaited", "_kind", "_spec")

    def __init__(self, kind, spec):
        self._kind = kind
        self._spec = spec
        self._awaited = False

    def __await__(self):
        if self._awaited:
            raise RuntimeError(f"a ctx.{self._kind}(...) can be awaited only once")
        self._awaited = True
        return (yield (_OP_FANOUT, self))


class _Race:
    __slots__ = ("_awaited", "_items", "_site")

    def __init__(self, items, site):
        self._items = items
        self._site = site
        self._awaited = False

    def __await__(self):
        if self._awaited:
            raise RuntimeError("a ctx.race(...) can be awaited only once")
        self._awaited = True
        return (yield (_OP_RACE, self))


class _Join:
    __slots__ = ("_task",)

    def __init__(self, task):
        self._task = task

    def __await__(self):
        return (yield (_OP_JOIN, self._task))


_AWAITABLES = _Call | _At | _Fanout | _Race
_CALLABLE = types.FunctionType | _Fn


def _awaitable_iter(item):
    if isinstance(item, types.CoroutineType | _AWAITABLES):
        return item.__await__()
    raise TypeError(f"cannot await {type(item).__name__}")


async def _drive(item):
    return await _Await(item)


class _Await:
    __slots__ = ("_item",)

    def __init__(self, item):
        self._item = item

    def __await__(self):
        return (yield from _awaitable_iter(self._item))


def _within_width(name, count):
    if count > _LIMITS["fanout_width"]:
        raise ValueError(f"ctx.{name} over {count} branches; the limit is "
                         f"{_LIMITS['fanout_width']} (fanout_width)")


def _branch_items(name, items):
    if not isinstance(items, list | tuple):
        raise TypeError(f"ctx.{name} takes a list of calls, got {type(items).__name__}")
    items = list(items)
    if len(items) > _LIMITS["fanout_width"]:
        _close_all(items)
        _within_width(name, len(items))
    for item in items:
        if not isinstance(item, types.CoroutineType | _AWAITABLES):
            _close_all(items)
            raise TypeError(f"ctx.{name} takes a list of calls; got {type(item).__name__}: "
                            "call the helper, do not await it first")
    return items


def _close_all(items):
    for item in items:
        _close(item)


def _close(item):
    if isinstance(item, types.CoroutineType):
        item.close()
    elif isinstance(item, _At):
        _close(item._coro)


# ---- tasks and the scheduler -------------------------------------------------------------


class _Task:
    __slots__ = (
        "cancelled",
        "chain",
        "coro",
        "done",
        "error",
        "held",
        "hold",
        "path",
        "value",
        "waiters",
    )

    def __init__(self, coro, path, chain):
        self.coro = coro
        self.path = path
        self.chain = chain
        self.done = False
        self.value = None
        self.error = None
        self.waiters = []  # callbacks run when the task ends
        self.hold = None  # a race collecting first calls: hold this task's first call
        self.held = None
        self.cancelled = False


class _Scheduler:
    def __init__(self):
        self.current = None
        self.ready = deque()
        self.channel = None
        self.nonce = None
        self.frame_bytes = _LIMITS["frame_bytes"]
        self.message_bytes = _LIMITS["message_bytes"] // 2  # a batch, with room to spare
        self.seq = 0
        self.outbox = []
        self.pending = {}  # seq -> (task, on_answer)
        self.occurrences = {}
        self.stopped = None
        self.open_race_branches = 0  # of races looked up, neither committed nor replayed

    # -- stepping --

    def spawn(self, coro, path, chain):
        task = _Task(coro, path, list(chain))
        self.ready.append((task, None, None))
        return task

    def step(self, task, value, error):
        if task.done or task.cancelled:
            return
        self.current = task
        try:
            if error is not None:
                op = task.coro.throw(error)
            else:
                op = task.coro.send(value)
        except StopIteration as stop:
            self._finish(task, stop.value, None)
            return
        except BaseException as exc:  # the task failed (ScriptStopped included)
            self._finish(task, None, exc)
            return
        finally:
            self.current = None
        self._dispatch(task, op)

    def _finish(self, task, value, error):
        task.done = True
        task.value, task.error = value, error
        waiters, task.waiters = task.waiters, []
        for waiter in waiters:
            waiter(task)

    def _dispatch(self, task, op):
        if not (isinstance(op, tuple) and len(op) == 2):
            self.ready.append((task, None, RuntimeError(
                "a script awaited something that is not a ctx call or a helper")))
            return
        kind, obj = op
        if kind == _OP_CALL:
            self._call(task, obj)
        elif kind == _OP_FANOUT:
            _start_fanout(self, task, obj)
        elif kind == _OP_JOIN:
            self._join(task, obj)
        elif kind == _OP_RACE:
            _start_race(self, task, obj)
        else:
            self.ready.append((task, None, RuntimeError("unknown runtime operation")))

    def _join(self, task, other):
        if other.done:
            self.ready.append((task, other.value, other.error))
        else:
            other.waiters.append(lambda t: self.ready.append((task, t.value, t.error)))

    # -- calls --

    def _call(self, task, call):
        if not isinstance(call._site, str):
            self.ready.append((task, None, ScriptStopped("capability call without a host "
                                                         "annotation")))
            return
        if task.hold is not None and task.held is None:
            task.held = call  # a race branch's first call: the host decides the race first
            task.hold(task)
            return
        self.send_call(task, call)

    def site_of(self, task, local_site):
        return ">".join([*task.chain, local_site])

    def next_occurrence(self, site, path):
        key = (site, path)
        occurrence = self.occurrences.get(key, 0)
        self.occurrences[key] = occurrence + 1
        return occurrence

    def call_frame(self, task, call):
        site = self.site_of(task, call._site)
        return {"kind": "call", "site": site, "path": list(task.path),
                "occurrence": self.next_occurrence(site, task.path),
                "capability": call._capability, "payload": call._payload, "take": call._take}

    def send_call(self, task, call):
        self.enqueue(self.call_frame(task, call), task, _deliver_call)

    def enqueue(self, frame, task, on_answer):
        self.seq += 1
        frame["seq"] = self.seq
        self.pending[self.seq] = (task, on_answer)
        self.outbox.append(frame)

    # -- the loop --

    def run(self, main):
        root = self.spawn(main, (), [])
        while True:
            while self.ready:
                self.step(*self.ready.popleft())
            if root.done:
                return root
            if self.outbox:
                self.flush()
            elif not self.pending:
                raise RuntimeError("the script waits for something that can never finish")
            self.receive()

    def flush(self):
        """Send everything issued since the last flush; one wave, split only by size."""
        frames, self.outbox = self.outbox, []
        batches, size, values = self._batches(frames)
        for name, seen in (("wave_frames", len(frames)), ("wave_bytes", size),
                           ("wave_values", values)):
            if seen > _LIMITS[name]:
                raise ScriptStopped(
                    f"the {len(frames)} calls the script started at once are past "
                    f"{_LIMITS[name]} ({name}: {seen}); start fewer calls before awaiting "
                    "them, and pass artifact references instead of contents")
        for i, one in enumerate(batches):
            self.channel.send({"t": "batch", "nonce": self.nonce, "frames": one,
                               "more": i < len(batches) - 1})

    def _batches(self, frames):
        """The wave's batches, and what the host counts of it: its messages' bytes (an
        upper bound: frames, their commas, the envelope around each batch) and the JSON
        values of their frames."""
        envelope = len(dumps({"t": "batch", "nonce": self.nonce, "frames": [], "more": False}))
        batches, batch, size, total, values = [], [], 0, envelope, 0
        for frame in frames:
            data = dumps(frame)
            if len(data) > self.frame_bytes:
                raise ScriptStopped(f"a capability payload is {len(data)} bytes; the limit is "
                                    f"{self.frame_bytes}: pass artifact references instead")
            if batch and size + len(data) > self.message_bytes:
                batches.append(batch)
                batch, size, total = [], 0, total + envelope
            batch.append(frame)
            size += len(data) + 1
            total += len(data) + 1
            values += language.count_values(frame, _LIMITS["wave_values"])
        batches.append(batch)
        return batches, total, values + len(batches)

    def receive(self):
        message = self.channel.receive()
        kind = message.get("t")
        if kind == "stop":
            raise ScriptStopped(str(message.get("message") or "the host stopped the run"))
        entry = self.pending.pop(message.get("seq"), None)
        if entry is None:
            raise ScriptStopped("the host answered a call that was never made")
        task, on_answer = entry
        if not task.cancelled:
            on_answer(self, task, message)


def _deliver_call(scheduler, task, answer):
    if answer.get("ok"):
        scheduler.ready.append((task, answer.get("result"), None))
        return
    error = answer.get("error") or {}
    scheduler.ready.append((task, None, CapabilityError(
        str(error.get("message") or "capability call failed"), code=error.get("code"),
        capability=error.get("capability"), identity=error.get("identity"),
        status=error.get("status"), charged=error.get("charged"))))


_SCHEDULER = _Scheduler()


# ---- fanout ------------------------------------------------------------------------------


def _first_failure(tasks):
    errors = [t.error for t in tasks if t.error is not None]
    for error in errors:
        if isinstance(error, ScriptStopped):
            return error
    return errors[0] if errors else None


def _await_all(scheduler, parent, tasks, finish):
    """Run ``finish(tasks)`` once every task has ended."""
    remaining = [len(tasks)]

    def one_done(_):
        remaining[0] -= 1
        if remaining[0] == 0:
            finish(tasks)

    if not tasks:
        finish(tasks)
        return
    for task in tasks:
        task.waiters.append(one_done)


def _nested_too_deep(scheduler, parent, items=()):
    """A fanout inside ``path_length`` others: the script gets an error, nothing starts."""
    if len(parent.path) < _LIMITS["path_length"]:
        return False
    _close_all(items)
    scheduler.ready.append((parent, None, ValueError(
        f"fanouts nested more than {_LIMITS['path_length']} deep (path_length)")))
    return True


def _start_fanout(scheduler, parent, fanout):
    kind, spec = fanout._kind, fanout._spec
    base = parent.path
    if _nested_too_deep(scheduler, parent, spec if kind == "parallel" else ()):
        return
    if kind == "parallel":
        tasks = [scheduler.spawn(_drive(item), (*base, i), parent.chain)
                 for i, item in enumerate(spec)]

        def finish(done):
            failure = _first_failure(done)
            if failure is not None:
                scheduler.ready.append((parent, None, failure))
            else:
                scheduler.ready.append((parent, [t.value for t in done], None))

        _await_all(scheduler, parent, tasks, finish)
    elif kind == "pipeline":
        stages, initial = spec
        _pipeline_stage(scheduler, parent, stages, 0, initial)
    else:
        _start_dag(scheduler, parent, spec)


def _pipeline_stage(scheduler, parent, stages, index, value):
    if index == len(stages):
        scheduler.ready.append((parent, value, None))
        return
    try:
        coro = stages[index](value)
    except BaseException as exc:
        scheduler.ready.append((parent, None, exc))
        return
    task = scheduler.spawn(_drive(coro), (*parent.path, index), parent.chain)

    def done(t):
        if t.error is not None:
            scheduler.ready.append((parent, None, t.error))
        else:
            _pipeline_stage(scheduler, parent, stages, index + 1, t.value)

    task.waiters.append(done)


def _start_dag(scheduler, parent, nodes):
    names = list(nodes)
    tasks = {}

    async def node(name):
        fn, deps = nodes[name]
        inputs = {}
        for dep in deps:
            inputs[dep] = await _Join(tasks[dep])
        return await _Await(fn(inputs))

    for i, name in enumerate(names):
        tasks[name] = scheduler.spawn(node(name), (*parent.path, i), parent.chain)

    def finish(done):
        failure = _first_failure(done)
        if failure is not None:
            scheduler.ready.append((parent, None, failure))
        else:
            scheduler.ready.append((parent, {n: tasks[n].value for n in names}, None))

    _await_all(scheduler, parent, list(tasks.values()), finish)


# ---- race --------------------------------------------------------------------------------


def _start_race(scheduler, parent, race):
    """Run every branch up to its first call, ask the host for a committed winner, then
    either run the winner alone (on its committed path) or release all first calls."""
    if not isinstance(race._site, str):
        _close_all(race._items)
        scheduler.ready.append((parent, None, ScriptStopped("race without a host annotation")))
        return
    if _nested_too_deep(scheduler, parent, race._items):
        return
    site = scheduler.site_of(parent, race._site)
    identity = {"site": site, "path": list(parent.path),
                "occurrence": scheduler.next_occurrence(site, parent.path)}
    tasks = []
    waiting = [len(race._items)]

    def reached_first_call(_task):
        waiting[0] -= 1
        if waiting[0] == 0:
            _race_lookup(scheduler, parent, identity, tasks)

    def ended_before_call(task):
        if task.held is None and not task.cancelled:
            reached_first_call(task)

    for i, item in enumerate(race._items):
        task = scheduler.spawn(_drive(item), (*parent.path, i), parent.chain)
        task.hold = reached_first_call
        task.waiters.append(ended_before_call)
        tasks.append(task)
    if not tasks:
        scheduler.ready.append((parent, None, ValueError("ctx.race needs at least one call")))


def _describe(scheduler, task):
    if task.held is not None:
        call = task.held
        return {"site": scheduler.site_of(task, call._site), "capability": call._capability,
                "payload": call._payload, "take": call._take}
    if task.done and task.error is None:
        return {"finished": True}
    return None


def _race_lookup(scheduler, parent, identity, tasks):
    # The host keeps each open race's branches until it is committed or replayed: past
    # the limit it would stop the sandbox, so the script hears it first.
    limit = _LIMITS["open_race_branches"]
    if scheduler.open_race_branches + len(tasks) > limit:
        for task in tasks:
            _cancel(task)
        scheduler.ready.append((parent, None, ValueError(
            f"ctx.race: over {limit} branches of races without a winner at once "
            "(open_race_branches); races that end without a winner stay open")))
        return
    scheduler.open_race_branches += len(tasks)
    frame = dict(identity, kind="race_lookup",
                 branches=[_describe(scheduler, t) for t in tasks])

    def answered(sched, _task, answer):
        if not answer.get("ok", True):
            sched.ready.append((parent, None, ScriptStopped("the host refused the race")))
            return
        winner = answer.get("winner")
        if isinstance(winner, int) and 0 <= winner < len(tasks):
            sched.open_race_branches -= len(tasks)  # replayed: the host closed it
            index = answer.get("index")
            _race_replay(sched, parent, tasks, winner, index if isinstance(index, int) else winner)
        else:
            _race_run(sched, parent, identity, tasks)

    scheduler.enqueue(frame, parent, answered)


def _cancel(task):
    task.cancelled = True
    try:
        task.coro.close()
    except BaseException:
        pass


def _race_replay(scheduler, parent, tasks, winner, index):
    for i, task in enumerate(tasks):
        if i != winner:
            _cancel(task)
    task = tasks[winner]
    task.hold = None
    task.path = (*parent.path, index)
    task.waiters = [lambda t: scheduler.ready.append((parent, t.value, t.error))]
    if task.done:
        scheduler.ready.append((parent, task.value, task.error))
    elif task.held is not None:
        scheduler.send_call(task, task.held)


def _race_run(scheduler, parent, identity, tasks):
    state = {"decided": False}

    def ended(task):
        if state["decided"] or task.cancelled:
            return
        if task.error is None or isinstance(task.error, ScriptStopped):
            state["decided"] = True
            for other in tasks:
                if other is not task and not other.done:
                    _cancel(other)
            if task.error is not None:
                scheduler.ready.append((parent, None, task.error))
                return
            winner = tasks.index(task)
            scheduler.open_race_branches -= len(tasks)
            scheduler.enqueue(dict(identity, kind="race_commit", winner=winner), parent,
                              lambda s, _t, _a: s.ready.append((parent, task.value, None)))
        elif all(t.done for t in tasks):
            state["decided"] = True
            scheduler.ready.append((parent, None, _first_failure(tasks)))

    for task in tasks:
        task.hold = None
        task.waiters = [ended]
    finished = [t for t in tasks if t.done]
    for task in finished:
        ended(task)
    if state["decided"]:
        return
    for task in tasks:
        if task.held is not None:
            scheduler.send_call(task, task.held)


# ---- ctx ---------------------------------------------------------------------------------


class Context:
    """The ``ctx`` a script receives: six methods and nothing else public."""

    __slots__ = ("_log_lines", "_logs")

    def __init__(self, log_lines):
        self._logs = []
        self._log_lines = log_lines

    def run(self, capability, payload, *, take=1, _site=None):
        if not isinstance(capability, str):
            raise TypeError("the capability name must be a string")
        if not isinstance(take, int) or isinstance(take, bool) or not (
                1 <= take <= language.MAX_TAKE):
            raise ValueError(f"take must be an integer from 1 to {language.MAX_TAKE}")
        try:
            dumps(payload)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"payload for {capability} is not JSON: {exc}") from None
        problem = language.value_problem(payload)
        if problem is not None:
            raise ValueError(f"payload for {capability} {problem}; pass artifact references "
                             "or a flatter value")
        return _Call(capability, payload, take, _site)

    def parallel(self, calls):
        return _Fanout("parallel", _branch_items("parallel", calls))

    def pipeline(self, stages, initial=None):
        if not isinstance(stages, list | tuple):
            raise TypeError("ctx.pipeline takes a list of stage functions")
        _within_width("pipeline", len(stages))
        for stage in stages:
            if not isinstance(stage, _CALLABLE):
                raise TypeError("ctx.pipeline stages are async functions of one argument")
        return _Fanout("pipeline", (list(stages), initial))

    def dag(self, nodes):
        if not isinstance(nodes, dict):
            raise TypeError("ctx.dag takes a dict name -> (async function, [dependencies])")
        _within_width("dag", len(nodes))
        for name, spec in nodes.items():
            if not (isinstance(spec, list | tuple) and len(spec) == 2
                    and isinstance(spec[0], _CALLABLE)
                    and isinstance(spec[1], list | tuple)):
                raise TypeError(f"ctx.dag node {name!r} must be (async function, [dependencies])")
            for dep in spec[1]:
                if dep not in nodes:
                    raise ValueError(f"ctx.dag node {name!r} depends on unknown node {dep!r}")
        _check_acyclic(nodes)
        return _Fanout("dag", {name: (spec[0], list(spec[1])) for name, spec in nodes.items()})

    def race(self, calls, *, _site=None):
        return _Race(_branch_items("race", calls), _site)

    def log(self, *parts):
        if len(self._logs) < self._log_lines:
            self._logs.append(" ".join(str(p) for p in parts)[:_LIMITS["log_line_chars"]])


def _check_acyclic(nodes):
    state = {}
    for start in nodes:
        if start in state:
            continue
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


# ---- the job -----------------------------------------------------------------------------


def script_builtins(log):
    """The builtins a script sees: exactly ``language.BUILTIN_NAMES`` (plus the host's
    ``__at__`` / ``__fn__`` call-site tags, which the checker never lets a script write)."""
    import builtins

    table = {name: getattr(builtins, name) for name in language.BUILTIN_FUNCTIONS
             if name != "print"}
    table.update({name: getattr(builtins, name) for name in language.CATCHABLE_ERRORS
                  if name != "CapabilityError"})
    table.update({"True": True, "False": False, "None": None,
                  "CapabilityError": CapabilityError,
                  "print": lambda *parts, **_: log(*parts), "__at__": _At.tagged,
                  "__fn__": _Fn})
    return table


def _text(value):
    """A field of an error as text within the host's limit."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # str() of a huge int, or of an object whose __str__ fails
        text = f"<a {type(value).__name__} that cannot be shown>"
    return text[:_LIMITS["error_chars"]]


def _field(value):
    """An error field as the host accepts it: None, a bounded integer, or text."""
    if value is None or (type(value) is int and abs(value) <= _LIMITS["number"]):
        return value
    return _text(value)


def _error_of(exc, memory_mb):
    if isinstance(exc, CapabilityError):
        return {"type": "CapabilityError", "message": _text(exc.message),
                **{name: _field(getattr(exc, name, None)) for name in
                   ("code", "capability", "identity", "status", "charged")}}
    line = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "script.py":
            line = tb.tb_lineno
        tb = tb.tb_next
    message = _text(exc)
    if isinstance(exc, MemoryError):
        message = (f"the script ran out of memory (limit {memory_mb} MiB)"
                   if memory_mb else "the script ran out of memory")
    elif isinstance(exc, RecursionError):
        message = "the script nested calls too deeply"
    return {"type": type(exc).__name__[:_LIMITS["name_chars"]], "message": message,
            "line": line}


def _execute(job):
    config = job.get("config") or {}
    scheduler = _SCHEDULER
    ctx = Context(_LIMITS["log_lines"])
    namespace = {"__builtins__": script_builtins(ctx.log), "__name__": "script"}
    started = time.monotonic()
    try:
        exec(compile(job["script"], "script.py", "exec"), namespace)
        orchestrate = namespace.get("orchestrate")
        if not isinstance(orchestrate, types.FunctionType):
            raise RuntimeError("the script defines no async def orchestrate(ctx, args)")
        root = scheduler.run(_drive(orchestrate(ctx, job.get("args"))))
        if root.error is not None:
            raise root.error
        dumps(root.value)
        problem = language.value_problem(root.value)
        if problem is not None:
            raise ValueError(f"the result {problem}; return a smaller, flatter value")
        return {"ok": True, "result": root.value, "logs": ctx._logs,
                "seconds": time.monotonic() - started}
    except ScriptStopped as stop:
        return {"ok": False, "stopped": True, "logs": ctx._logs,
                "error": {"type": "ScriptStopped", "message": _text(stop)}}
    except Exception as exc:
        return {"ok": False, "logs": ctx._logs,
                "error": _error_of(exc, config.get("memory_mb"))}


def _result_message(nonce, outcome, limit):
    message = dict(outcome, t="result", nonce=nonce)
    try:
        data = dumps(message)
    except (TypeError, ValueError) as exc:
        data = ""
        message = {"t": "result", "nonce": nonce, "ok": False, "logs": [],
                   "error": {"type": "TypeError",
                             "message": _text(f"the result is not JSON: {exc}")}}
    if len(data) > limit:
        message = {"t": "result", "nonce": nonce, "ok": False,
                   "logs": outcome.get("logs", [])[:20], "error": {
                       "type": "OutputTooLarge",
                       "message": f"script result is {len(data)} bytes; the limit is {limit}: "
                                  "return artifact references, not contents"}}
    return message


def main(socket_path):
    channel = _Channel(socket_path)
    job = channel.receive()  # a warm sandbox waits here until it is given a job
    if job.get("t") != "job":
        os._exit(3)
    _SCHEDULER.channel = channel
    _SCHEDULER.nonce = job.get("nonce")
    outcome = _execute(job)
    limit = int((job.get("config") or {}).get("output_bytes", 1 << 20))
    try:
        channel.send(_result_message(_SCHEDULER.nonce, outcome, limit))
    except OSError:
        pass
    os._exit(0)  # nothing left to clean up; skip interpreter teardown


if __name__ == "__main__":
    main(sys.argv[1])

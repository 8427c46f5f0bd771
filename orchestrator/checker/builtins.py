"""Allowlists as data; the rule modules only look names up here.

What a script may name and call comes from ``sandbox.language`` (the table the sandbox
runtime is built from). The dicts of refused names below only explain *why* a name is
refused; they never decide whether it is.
"""

from __future__ import annotations

from sandbox import language

# ---- ctx ----------------------------------------------------------------------------------

# ctx method -> (positional arity, awaited?); the method names come from sandbox.language.
_CTX_SHAPES: dict[str, tuple[int, bool]] = {
    "run": (2, True),
    "parallel": (1, True),
    "pipeline": (2, True),
    "dag": (1, True),
    "race": (1, True),
    "log": (1, False),
}
CTX_METHODS: dict[str, tuple[int, bool]] = {
    name: _CTX_SHAPES[name] for name in language.CTX_METHODS}
# Keyword arguments of ctx.run a script may write, and the largest literal take=.
RUN_KEYWORDS: frozenset[str] = frozenset(language.RUN_KEYWORDS)
MAX_TAKE: int = language.MAX_TAKE
FANOUT_METHODS: frozenset[str] = frozenset({"parallel", "race"})

CTX_USAGE: dict[str, str] = {
    "run": 'await ctx.run("capability.name", {"field": value})',
    "parallel": "await ctx.parallel([helper(ctx, x) for x in items[:N]])",
    "pipeline": "await ctx.pipeline([stage_one, stage_two], initial_value)",
    "dag": 'await ctx.dag({"a": (step_a, []), "b": (step_b, ["a"])})',
    "race": "await ctx.race([attempt(ctx, 1), attempt(ctx, 2)])",
    "log": 'ctx.log("message")',
}

# Old or invented APIs a model tends to reach for, and the method that replaces them.
OLD_API_HINTS: dict[str, str] = {
    "call": "run", "invoke": "run", "capability": "run", "execute": "run", "request": "run",
    "run_capability": "run", "call_capability": "run", "tool": "run", "use": "run",
    "gather": "parallel", "map": "parallel", "spawn": "parallel", "fanout": "parallel",
    "all": "parallel", "batch": "parallel", "concurrent": "parallel", "fan_out": "parallel",
    "sequence": "pipeline", "chain": "pipeline", "then": "pipeline",
    "graph": "dag", "workflow": "dag",
    "first": "race", "any": "race", "select": "race",
    "print": "log", "info": "log", "debug": "log", "warn": "log", "warning": "log",
    "emit": "log",
}

# ---- builtins ---------------------------------------------------------------------------
# One table for both walls: the names come from sandbox.language, which the sandbox runtime
# provides exactly. Never list them again here.

CATCHABLE_ERRORS: frozenset[str] = frozenset(language.CATCHABLE_ERRORS)
ALLOWED_BUILTINS: frozenset[str] = language.BUILTIN_NAMES

# Free names that would be clocks, randomness or hidden inputs (reported as R04, not R07).
NONDETERMINISTIC_NAMES: dict[str, str] = {
    "time": "a clock", "datetime": "a clock", "date": "a clock", "random": "randomness",
    "uuid": "randomness", "secrets": "randomness", "os": "the host environment",
    "sys": "the interpreter state", "environ": "the host environment",
    "id": "a memory address", "hash": "a per-process hash seed",
    "input": "a hidden input (stdin)",
}

# Attribute calls that read a clock or a random source whatever the receiver claims to be.
NONDETERMINISTIC_ATTRS: frozenset[str] = frozenset({
    "now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter",
    "process_time", "random", "randint", "randrange", "choice", "choices", "shuffle",
    "uniform", "getrandbits", "urandom", "uuid1", "uuid4", "token_hex", "token_bytes",
    "getenv", "environ", "getpid",
})

# Reflection that reaches attributes by name (reported as R06).
REFLECTION_NAMES: frozenset[str] = frozenset({
    "getattr", "setattr", "delattr", "hasattr", "vars", "dir",
})

# ---- attributes (R06) -----------------------------------------------------------------------
# Allowed: a CALL of a data method (x.m(...)) and a plain LOAD of an error field (e.code).
DATA_METHODS: frozenset[str] = language.DATA_METHODS
ERROR_FIELDS: frozenset[str] = language.ERROR_FIELDS

_COROUTINE = ("drives a coroutine or generator by hand; a script only awaits helpers, and "
              "send() would hand it the event loop's Future")
_FRAME = "reaches a frame, and from there other modules' globals and real builtins"
_CODE = "reaches a code object (constants, names, bytecode)"
_LOOP = "reaches the event loop, which can start processes and open connections"
_FUTURE = "is a method of an asyncio Future or Task; scripts never hold one"
_EXCEPTION = "reads exception internals (arguments, traceback, chained exceptions)"
_FORMAT = "can read attributes through its format string; use an f-string with plain names"
# Why well-known escape attributes are refused. Explanations only: any attribute outside
# the allowlist is refused whether or not it is named here.
REFUSED_ATTRIBUTE_REASONS: dict[str, str] = {
    **dict.fromkeys(("send", "throw", "close", "asend", "athrow", "aclose", "__next__",
                     "__await__"), _COROUTINE),
    **dict.fromkeys(("cr_frame", "cr_await", "cr_code", "cr_origin", "cr_running",
                     "cr_suspended", "gi_frame", "gi_code", "gi_yieldfrom", "gi_running",
                     "gi_suspended", "ag_frame", "ag_code", "ag_await", "ag_running"),
                    "reaches the frame or code of a coroutine or generator"),
    **dict.fromkeys(("f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace",
                     "f_lasti", "f_lineno", "tb_frame", "tb_next", "tb_lasti", "tb_lineno"),
                    _FRAME),
    **dict.fromkeys(("co_code", "co_consts", "co_names", "co_varnames", "co_filename",
                     "func_globals", "func_code", "im_func", "im_self"), _CODE),
    **dict.fromkeys(("get_loop", "run_in_executor", "create_task", "subprocess_shell",
                     "subprocess_exec", "create_connection", "create_server", "call_soon",
                     "call_later", "call_at", "run_until_complete", "stop",
                     "getaddrinfo", "sock_connect"), _LOOP),
    **dict.fromkeys(("result", "exception", "set_result", "set_exception", "cancel",
                     "cancelled", "done", "add_done_callback", "remove_done_callback",
                     "get_stack", "print_stack", "get_coro", "get_name", "set_name"),
                    _FUTURE),
    **dict.fromkeys(("args", "with_traceback", "add_note", "__traceback__", "__context__",
                     "__cause__"), _EXCEPTION),
    **dict.fromkeys(("format", "format_map"), _FORMAT),
    "mro": "reaches the class hierarchy",
}

IMPORT_NAMES: frozenset[str] = frozenset({"__import__", "importlib"})

# Why a known-dangerous builtin is refused, for a more useful message than "not allowed".
DENIED_BUILTIN_REASONS: dict[str, str] = {
    "eval": "evaluates code", "exec": "executes code", "compile": "compiles code",
    "open": "reads or writes files", "globals": "exposes interpreter state",
    "locals": "exposes interpreter state", "type": "reaches classes and metaclasses",
    "object": "reaches the class hierarchy", "super": "reaches the class hierarchy",
    "breakpoint": "starts a debugger", "help": "starts the interactive help",
    "memoryview": "exposes raw memory", "iter": "creates unbounded iterators",
    "next": "consumes iterators outside a bounded loop", "classmethod": "defines classes",
    "staticmethod": "defines classes", "property": "defines classes",
    "bytes": "is not a JSON value", "bytearray": "is not a JSON value",
    "exit": "ends the interpreter", "quit": "ends the interpreter",
    "Exception": "is too broad; raise ValueError or RuntimeError",
    "BaseException": "is too broad; raise ValueError or RuntimeError",
    "pow": "can build huge integers; use ** with small constants",
    "format": "runs format specs; use an f-string",
    "repr": "shows memory addresses for functions and coroutines; format data only (a "
            "string, number, list or dict) with str() or an f-string",
    "map": "is lazy; use a list comprehension", "filter": "is lazy; use a list comprehension",
}

# Methods that grow a collection in place (for the bounded-size analysis).
GROW_ONE_METHODS: frozenset[str] = frozenset({"append", "insert", "add", "setdefault"})
GROW_MANY_METHODS: frozenset[str] = frozenset({"extend", "update"})
MUTATING_METHODS: frozenset[str] = GROW_ONE_METHODS | GROW_MANY_METHODS | frozenset({
    "pop", "remove", "clear", "sort", "reverse", "discard", "popitem",
})

# Calls that pass the bound of their first argument through.
SAME_LENGTH_CALLS: frozenset[str] = frozenset({
    "enumerate", "reversed", "sorted", "list", "tuple", "dict",
})
SAME_LENGTH_METHODS: frozenset[str] = frozenset({"items", "keys", "values", "copy"})
SET_BUILDERS: frozenset[str] = frozenset({"set", "frozenset"})
SET_METHODS: frozenset[str] = frozenset({
    "union", "intersection", "difference", "symmetric_difference",
})
# Consumers for which a set's iteration order does not matter.
ORDER_FREE_CONSUMERS: frozenset[str] = frozenset({
    "sorted", "len", "min", "max", "sum", "any", "all", "set", "frozenset", "isinstance", "bool",
})

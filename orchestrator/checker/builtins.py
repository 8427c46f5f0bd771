"""Allowlists and denylists as data; the rule modules only look names up here."""

from __future__ import annotations

# ---- ctx ----------------------------------------------------------------------------------

# ctx method -> (positional arity, awaited?)
CTX_METHODS: dict[str, tuple[int, bool]] = {
    "run": (2, True),
    "parallel": (1, True),
    "pipeline": (2, True),
    "dag": (1, True),
    "race": (1, True),
    "log": (1, False),
}
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

# ---- builtins -----------------------------------------------------------------------------

CATCHABLE_ERRORS: frozenset[str] = frozenset({
    "CapabilityError", "ValueError", "KeyError", "IndexError", "TypeError",
    "ZeroDivisionError", "RuntimeError",
})

ALLOWED_BUILTINS: frozenset[str] = frozenset({
    "len", "range", "enumerate", "zip", "min", "max", "sum", "sorted", "reversed",
    "abs", "round", "str", "int", "float", "bool", "list", "dict", "tuple", "set",
    "frozenset", "any", "all", "isinstance", "print", "repr", "chr", "ord", "divmod",
    "True", "False", "None",
}) | CATCHABLE_ERRORS

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

FORMAT_METHODS: frozenset[str] = frozenset({"format", "format_map"})

# Public attributes of frames, generators, coroutines, tracebacks and code objects: each
# is a step of a walk to another module's globals (and from there to real builtins).
INTROSPECTION_ATTRIBUTES: frozenset[str] = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended",
    "cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended",
    "ag_frame", "ag_code", "ag_await", "ag_running",
    "f_back", "f_globals", "f_locals", "f_builtins", "f_code", "f_trace", "f_lasti",
    "tb_frame", "tb_next", "tb_lasti", "tb_lineno", "with_traceback",
    "co_code", "co_consts", "co_names", "co_varnames", "co_filename",
    "func_globals", "func_code", "im_func", "im_self", "mro",
})

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

"""The script language's runtime surface, as data.

One table that both walls read: the checker (``orchestrator.checker``) allows
exactly these names and attributes, and the sandbox runtime (``runtime.py``)
provides exactly these builtins. A test proves that every name the checker
allows exists in the sandbox, and that nothing else does.

Standard library only, no imports: this file ships inside the sandbox image
next to ``runtime.py``.
"""

# ctx methods a script may call (ctx has no other public attribute).
CTX_METHODS = ("run", "parallel", "pipeline", "dag", "race", "log")

# Keyword arguments of ctx.run a script may write (``_site`` is the host's).
RUN_KEYWORDS = ("take",)

# The limits on what a script builds and what its sandbox sends, in one table read by the
# three parts that hold them: the checker (constants, sizes, fanouts), the runtime (which
# refuses a payload, result or wave past them with a clear error, and so never sends one)
# and the host (which stops a sandbox that sends one: SandboxProtocolError). docs/rules.md
# states the table; a test holds the two together.
LIMITS = {
    # values: payloads, results, constants
    "value_depth": 32,  # lists and dicts nested in one value
    "value_items": 100_000,  # JSON values in one payload or result, or one constant
    "string_chars": 32 * 1024,  # a string constant, and every size a script writes
    "int_bits": 1024,  # an integer constant
    # calls
    "take": 100,  # take=N of ctx.run
    "fanout_width": 1000,  # branches of one ctx.parallel/race/dag/pipeline
    "open_race_branches": 20_000,  # branches of the races looked up and not yet decided
    "path_length": 64,  # fanouts nested around one call
    "site_chars": 4096,  # a call site's name (its chain of local sites)
    "name_chars": 100,  # a capability, a frame or message kind, an error type, the nonce
    # messages from the sandbox to the host
    "message_bytes": 8 << 20,  # one message (the runtime splits a wave at half of it)
    "frame_bytes": 1 << 20,  # one call frame
    "wave_frames": 4096,  # frames of one wave (calls issued before the script waits)
    "wave_bytes": 16 << 20,  # the messages of one wave together
    "wave_values": 1_000_000,  # JSON values in the frames of one wave (host memory)
    "result_bytes": 4 << 20,  # the script's result (the envelope's output_bytes, at most)
    "log_lines": 200,  # lines of ctx.log and print kept for a run
    "log_line_chars": 2000,  # one log line
    "error_chars": 4000,  # the message and every other text field of a script's error
    "number": 2**53,  # any count, index or code in a message, in absolute value
}

MAX_TAKE = LIMITS["take"]
MAX_VALUE_DEPTH = LIMITS["value_depth"]


def value_problem(value, depth=MAX_VALUE_DEPTH, items=LIMITS["value_items"]):
    """What is wrong with the shape of a JSON-like value, or None: nested past ``depth``
    levels of lists and dicts, or holding more than ``items`` values."""
    return _walk(value, depth, items)[0]


def count_values(value, limit):
    """How many JSON values ``value`` holds (itself included), counted up to ``limit + 1``."""
    return _walk(value, float("inf"), limit)[1]


def _walk(value, depth, items):
    """(problem or None, values seen). Iterative: a recursive walk is what a hostile value
    would target."""
    stack = [(value, 1)]
    count = 0
    while stack:
        item, level = stack.pop()
        count += 1
        if count > items:
            return f"holds more than {items} values", count
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if level > depth:
            return f"nests deeper than {depth} levels of lists and dicts", count
        stack.extend((child, level + 1) for child in children)
    return None, count


def too_deep(value, limit=MAX_VALUE_DEPTH):
    """Is ``value`` nested deeper than ``limit`` levels of lists and dicts?"""
    return value_problem(value, limit, float("inf")) is not None


# Errors a script may raise and catch by name.
CATCHABLE_ERRORS = (
    "CapabilityError", "ValueError", "KeyError", "IndexError", "TypeError",
    "ZeroDivisionError", "RuntimeError",
)

# Builtin functions the sandbox provides (``print`` writes to the run's log).
BUILTIN_FUNCTIONS = (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "float",
    "frozenset", "int", "isinstance", "len", "list", "max", "min", "ord", "print",
    "range", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip",
)

CONSTANTS = ("True", "False", "None")

BUILTIN_NAMES = frozenset(BUILTIN_FUNCTIONS + CATCHABLE_ERRORS + CONSTANTS)

# Methods of plain data (str, list, dict, tuple, set, int, float) a script may call.
# Nothing here is a method of a coroutine, a function, an exception or a runtime
# object, so an allowed attribute cannot reach anything but data.
STR_METHODS = (
    "capitalize", "casefold", "center", "count", "endswith", "expandtabs", "find",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
    "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join",
    "ljust", "lower", "lstrip", "partition", "removeprefix", "removesuffix", "replace",
    "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines",
    "startswith", "strip", "swapcase", "title", "upper", "zfill",
)
LIST_METHODS = (
    "append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove",
    "reverse", "sort",
)
DICT_METHODS = (
    "clear", "copy", "get", "items", "keys", "pop", "popitem", "setdefault", "update",
    "values",
)
SET_METHODS = (
    "add", "clear", "copy", "difference", "difference_update", "discard",
    "intersection", "intersection_update", "isdisjoint", "issubset", "issuperset",
    "pop", "remove", "symmetric_difference", "symmetric_difference_update", "union",
    "update",
)
NUMBER_METHODS = ("bit_length", "is_integer")

DATA_METHODS = frozenset(
    STR_METHODS + LIST_METHODS + DICT_METHODS + SET_METHODS + NUMBER_METHODS)

# Attributes a script may read without calling: the fields of a CapabilityError.
ERROR_FIELDS = frozenset(("message", "code", "capability", "identity", "status", "charged"))

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
MAX_TAKE = 100

# How deep a payload, a result or a constant may nest (lists and dicts): one limit for
# the checker (constants), the runtime (payloads and the result, refused with a clear
# error) and the host (which allows a message the few levels that wrap a value).
MAX_VALUE_DEPTH = 32


def too_deep(value, limit=MAX_VALUE_DEPTH):
    """Iterative depth check (a recursive one is what a hostile value would target)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

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

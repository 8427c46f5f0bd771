"""Python source parsed one tree at a time per process, with the same verdict everywhere.

CPython 3.11 counts the AST constructor's recursion depth in interpreter state that all
threads share (python/cpython#106905): two threads building trees at once can fail with
``SystemError: AST constructor recursion depth mismatch``. The dispatcher checks scripts
in threads, so every parse in the product takes this lock; parsing holds the GIL anyway,
so the lock costs no parallelism. Warnings are ignored inside it, so a process's warning
filters (``-W error``) cannot turn a ``SyntaxWarning`` into a different verdict, and
``warnings.catch_warnings`` (process-global) is only entered under the lock.
"""

from __future__ import annotations

import ast
import threading
import warnings

_PARSING = threading.Lock()


def parse_python(text: str) -> ast.Module:
    """``ast.parse(text)`` as a module; raises what it raises (SyntaxError, ValueError,
    RecursionError, MemoryError)."""
    with _PARSING, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(text, mode="exec")

"""Admission in threads: the dispatcher checks, annotates and gates scripts in 16 threads.

CPython 3.11 shares the AST constructor's depth counter between threads
(python/cpython#106905); a finalizer that runs during one thread's parse lets another
thread parse too, and one of them fails with ``SystemError`` instead of a verdict. Every
parse goes through ``broker.syntax.parse_python``; this test makes finalizers run during
parses (a low GC threshold and garbage cycles with ``__del__``) and asks for the
single-threaded verdict from every thread.
"""

from __future__ import annotations

import gc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.admission import Admission, admit
from orchestrator.source import decode_source

_SCOUT = (Path(__file__).parents[2] / "orchestrator" / "demo" / "scout_v1.script").read_text()
_NESTED = "\n".join(f"TABLE_{i} = " + "[" * 30 + str(i) + "]" * 30 for i in range(60))
_SOURCE = decode_source(_SCOUT.replace('"""\n\n', f'"""\n\n{_NESTED}\n', 1))


class _Cycle:
    def __del__(self) -> None:
        sum(range(64))  # bytecode in a finalizer: the interpreter may switch threads here


def _admit_with_garbage(_: int) -> object:
    outcomes = []
    for _ in range(3):
        for _ in range(300):
            cycle = _Cycle()
            cycle.me = cycle
        outcome = admit(_SOURCE, [])
        assert isinstance(outcome, Admission), outcome
        outcomes.append((outcome.text, sorted(outcome.whitelist)))
    return outcomes


@pytest.fixture
def eager_gc():
    before = gc.get_threshold()
    gc.set_threshold(50, 2, 2)
    yield
    gc.set_threshold(*before)


def test_sixteen_threads_admit_the_same_script_as_one(eager_gc) -> None:
    alone = _admit_with_garbage(0)
    with ThreadPoolExecutor(16) as pool:
        together = list(pool.map(_admit_with_garbage, range(16)))
    assert all(outcomes == alone for outcomes in together)

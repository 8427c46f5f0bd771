"""A progress line on a terminal while a model answers.

``Waiting(backend, console, rounds=N)`` wraps any backend. Each ``complete``
shows ``waiting for MODEL (repair, round 2 of 5): 14 s`` on the console while
the request runs, with the backend's latest notice (a retry, its reason and
delay) appended, and removes the line when the answer is in. On anything but
a terminal it shows nothing: logs and pipes stay clean.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from rich.console import Console
from rich.markup import escape

from orchestrator.models.base import Message, ModelBackend


class Waiting:
    def __init__(self, backend: ModelBackend, console: Console, *, rounds: int | None = None,
                 interval: float = 0.5) -> None:
        self.backend = backend
        self.console = console
        self.rounds = rounds
        self.interval = interval
        self.calls: Counter[str] = Counter()

    @property
    def name(self) -> str:
        return self.backend.name

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if callable(close):
            close()

    def label(self, purpose: str) -> str:
        count = self.calls[purpose]
        if purpose == "repair" and self.rounds:
            where = f"round {count} of {self.rounds}"
        else:
            where = f"request {count}"
        return f"waiting for {self.name} ({purpose}, {where})"

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        self.calls[purpose] += 1
        if not self.console.is_terminal:
            return self.backend.complete(messages, purpose=purpose)
        label, started = self.label(purpose), time.monotonic()
        notice = [""]
        inner: Any = self.backend  # an HTTP backend tells why it retries (on_notice)
        hooked = hasattr(inner, "on_notice")
        if hooked:
            inner.on_notice = lambda text: notice.__setitem__(0, text)

        def line() -> str:
            tail = f" · {notice[0]}" if notice[0] else ""
            return escape(f"{label}: {time.monotonic() - started:.0f} s{tail}")

        stop = threading.Event()
        with self.console.status(line()) as status:
            def tick() -> None:
                while not stop.wait(self.interval):
                    status.update(line())

            ticker = threading.Thread(target=tick, name="revise-model-wait", daemon=True)
            ticker.start()
            try:
                return self.backend.complete(messages, purpose=purpose)
            finally:
                stop.set()
                ticker.join()
                if hooked:
                    inner.on_notice = None


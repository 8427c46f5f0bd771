"""Waiting in a test for something another process or thread does."""

from __future__ import annotations

import time
from collections.abc import Callable


def until(condition: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Whether ``condition()`` turned true within ``seconds`` (looked at every 20 ms)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True

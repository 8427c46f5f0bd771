"""A provider's limits, honoured by a whole process (pure, threads only)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from broker.provider_gate import ProviderGate


def test_at_most_limit_requests_of_one_kind_are_in_flight_at_once() -> None:
    gate = ProviderGate(limit=3)
    lock, inside, most = threading.Lock(), [0], [0]

    def request(_: int) -> None:
        with gate.turn("images"):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.02)
            with lock:
                inside[0] -= 1

    with ThreadPoolExecutor(12) as pool:
        list(pool.map(request, range(36)))
    assert most[0] == 3
    with gate.turn("text"), gate.turn("text"), gate.turn("text"):
        pass  # another kind has slots of its own


def test_a_cool_down_holds_every_turn_of_that_kind_back() -> None:
    gate = ProviderGate()
    gate.cool_down("images", 0.3)
    started = time.monotonic()
    with gate.turn("text"):
        assert time.monotonic() - started < 0.2  # another provider is not held back
    with gate.turn("images"):
        assert time.monotonic() - started >= 0.3
    gate.cool_down("images", 0.0)  # a shorter pause never shortens a longer one
    gate.cool_down("images", 5.0)
    gate.cool_down("images", 0.1)
    assert not _turned_within(gate, "images", 0.3)


def _turned_within(gate: ProviderGate, kind: str, seconds: float) -> bool:
    done = threading.Event()

    def take() -> None:
        with gate.turn(kind):
            done.set()

    threading.Thread(target=take, daemon=True).start()
    return done.wait(seconds)

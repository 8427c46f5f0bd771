"""The heartbeat loop every lease and roster entry runs on."""

from __future__ import annotations

import threading

from broker.periodic import Periodic


def _counting(answers: list[object]) -> tuple[list[int], threading.Event, object]:
    calls: list[int] = []
    done = threading.Event()

    def beat() -> object:
        calls.append(1)
        answer = answers[min(len(calls), len(answers)) - 1]
        if len(calls) >= len(answers):
            done.set()
        if isinstance(answer, Exception):
            raise answer
        return answer

    return calls, done, beat


def test_a_beat_that_raises_is_tried_again_and_false_ends_the_thread() -> None:
    calls, done, beat = _counting([RuntimeError("store away"), None, 0.01, False])
    periodic = Periodic("test-beat", 0.01, beat).start()
    assert done.wait(5)
    periodic._thread.join(5)
    assert not periodic.alive()
    assert len(calls) == 4


def test_stop_ends_the_loop_before_the_next_beat() -> None:
    calls, _, beat = _counting([None])
    with Periodic("test-beat", 60, beat) as periodic:
        assert periodic.alive()
    periodic._thread.join(5)
    assert not periodic.alive()
    assert calls == []


def test_first_after_zero_beats_at_once() -> None:
    calls, done, beat = _counting([False])
    Periodic("test-beat", 60, beat, first_after=0).start()
    assert done.wait(5)
    assert calls == [1]

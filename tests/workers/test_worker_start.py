"""What a worker does as it starts: its threads share one result backend (one Redis
connection pool), where a client's threads keep one each (real Redis, real Celery
backends); what it holds once started leaves the garbage collector's view."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from broker.settings import Settings
from workers.app import ReviseCelery, freeze_startup_objects, make_app, share_result_backend


class _Worker:
    """What sends ``worker_init``: a worker holding its app."""

    def __init__(self, app: ReviseCelery) -> None:
        self.app = app


def _backends_of_threads(app: ReviseCelery, threads: int) -> list[Any]:
    seen: list[Any] = []
    lock = threading.Lock()

    def look() -> None:
        backend = app.backend
        with lock:
            seen.append(backend)

    running = [threading.Thread(target=look) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join()
    return seen


@pytest.mark.redis
def test_a_workers_threads_share_one_backend_that_stores_results(redis_url: str) -> None:
    app = make_app(Settings(redis_url=redis_url))
    share_result_backend(sender=_Worker(app))  # what Celery calls on worker_init
    backends = _backends_of_threads(app, 8)
    assert len({id(backend) for backend in backends}) == 1

    def store(n: int) -> None:
        app.backend.store_result(f"shared-backend-{n}", {"n": n}, "SUCCESS")

    storing = [threading.Thread(target=store, args=(n,)) for n in range(8)]
    for thread in storing:
        thread.start()
    for thread in storing:
        thread.join()
    for n in range(8):
        assert app.backend.get_task_meta(f"shared-backend-{n}")["result"] == {"n": n}


@pytest.mark.redis
def test_a_clients_threads_keep_a_backend_each(redis_url: str) -> None:
    app = make_app(Settings(redis_url=redis_url))
    backends = _backends_of_threads(app, 4)
    assert len({id(backend) for backend in backends}) == 4


def test_a_started_workers_objects_leave_the_collectors_view(monkeypatch) -> None:
    before = gc.get_freeze_count()
    app = make_app(Settings())
    try:
        freeze_startup_objects(sender=_Worker(app))  # what Celery calls on worker_ready
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
    # The count alone cannot show a second call froze nothing: frozen objects another
    # thread frees meanwhile lower it.
    freezes: list[None] = []
    monkeypatch.setattr(gc, "freeze", lambda: freezes.append(None))
    freeze_startup_objects(sender=object())  # not a Revise worker: nothing happens
    assert freezes == []
    freeze_startup_objects(sender=_Worker(app))
    assert freezes == [None]


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as listing:
            return [int(child) for child in listing.read().split()]
    except FileNotFoundError:
        return []


@pytest.mark.redis
@pytest.mark.postgres
def test_the_beat_a_reconciler_embeds_dies_with_it(make_stack) -> None:
    """SIGKILLed, a reconciler left its beat running (a restart then ran two)."""
    import os
    import signal

    from .conftest import wait_for

    stack = make_stack()
    reconciler = stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready(60)
    (beat,) = wait_for(lambda: _children(reconciler.pid), 30, "the embedded beat")
    os.kill(reconciler.pid, signal.SIGKILL)
    reconciler.wait(10)
    wait_for(lambda: not os.path.exists(f"/proc/{beat}") or
             open(f"/proc/{beat}/stat", encoding="ascii").read().split(") ")[1][0] in "ZX",
             15, "the beat to end with its worker")

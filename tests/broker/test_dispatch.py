"""The broker's wave: one claim transaction, concurrent copies paid once, stale copies
never paid, a failed call answered again (SQLite and PostgreSQL, the local provider)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from broker.calls import CallRequest, Outcome
from broker.catalog import CATALOG
from broker.envelope import Envelope
from broker.errors import RevisionNotRunning
from broker.identity import Identity, call_digest
from broker.settings import Settings
from orchestrator.embedded import Services, open_services

RUN = "wave-run"


@pytest.fixture
def services(tmp_path: Path, store_url: str):
    opened = open_services(Settings(home=tmp_path / "home", database_url=store_url),
                           latency=0.2)
    yield opened
    opened.close()


def _wave(revision: int, sizes: list[str]) -> list[CallRequest]:
    requests = []
    for i, size in enumerate(sizes):
        payload = CATALOG["image.generate"].normalize({"prompt": f"shot {i}", "size": size})
        requests.append(CallRequest(RUN, revision, Identity("orchestrate/#0", (i,), 0),
                                    "image.generate", payload, call_digest(payload), "fp"))
    return requests


def _paid(services: Services) -> list[str]:
    return [line["identity"] for line in services.provider.log.read()]


def _execute(broker, wave: list) -> list:
    """A wave as a session runs it: claimed, then executed."""
    claimed = broker.claim_wave(wave)
    return [*claimed.answered, *broker.run_wave(claimed)]


def test_two_copies_of_one_wave_at_once_pay_each_call_once(services: Services) -> None:
    services.store.ensure_run(RUN)
    revision = services.store.add_revision(RUN, "# src", "h")
    wave = _wave(revision, ["512x512"] * 4)
    reports: list[list] = [[], []]
    barrier = threading.Barrier(2)

    def deliver(n: int) -> None:
        broker = services.broker(Envelope(concurrency=4))
        barrier.wait()
        reports[n] = _execute(broker, wave)
        broker.close()

    threads = [threading.Thread(target=deliver, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(_paid(services)) == sorted(str(r.identity) for r in wave)
    outcomes = sorted(str(r.outcome) for copy in reports for r in copy)
    # each copy reports the revision's own work, paid once (the provider's log says so)
    assert outcomes == ["executed"] * 8
    results = {}
    for copy in reports:
        for report in copy:
            results.setdefault(report.identity, report.result)
            assert report.result == results[report.identity]  # the same committed result
    assert len(services.store.list_attempts(RUN)) == 4


def test_a_failed_call_is_answered_again_and_a_finished_revision_pays_nothing(
        services: Services) -> None:
    services.store.ensure_run(RUN)
    revision = services.store.add_revision(RUN, "# src", "h")
    wave = _wave(revision, ["512x512", "999x999"])  # the provider rejects the second
    broker = services.broker(Envelope())
    first = {r.identity: r for r in _execute(broker, wave)}
    assert [str(first[r.identity].outcome) for r in wave] == ["executed", "failed"]
    again = {r.identity: r for r in _execute(broker, wave)}  # a redelivered job
    assert again[wave[1].identity].outcome is Outcome.FAILED
    assert again[wave[1].identity].error == first[wave[1].identity].error
    # The revision's own attempts, as when first answered: paid once, reported as such.
    assert again[wave[1].identity].attempted and again[wave[1].identity].cost == 0.0
    assert again[wave[0].identity].outcome is Outcome.EXECUTED
    assert again[wave[0].identity].cost == first[wave[0].identity].cost
    assert len(_paid(services)) == 2

    services.store.finish_revision(RUN, revision, "failed", {})
    late = _execute(broker, _wave(revision, ["256x256"] * 3)[2:])
    assert len(late) == 1 and isinstance(late[0].stop, RevisionNotRunning)
    assert len(_paid(services)) == 2
    broker.close()

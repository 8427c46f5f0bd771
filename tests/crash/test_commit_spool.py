"""A paid result survives a store that cannot take its commit (issue 17, item 1).

The store refuses commits (``StoreUnavailable``) for a while after the provider
answered: the broker spools the result (fsynced), retries, and the slot is
committed once the store answers, with one paid call. When the retry window
runs out, the spool keeps the result for the next drain, and the provider log
holds it for `revise reconcile --from-log`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from broker.envelope import Envelope
from broker.errors import InputError, StoreUnavailable
from broker.records import AttemptStatus
from orchestrator.embedded import open_services
from orchestrator.reconcile import reconcile_attempt, result_from_log, sweep
from sandbox.runner import ProcessRunner

from .kit import provider_lines, script, settings_for


class RefusingCommits:
    """The real store, except that commits fail while ``down`` is set (an outage that
    begins after the provider answered)."""

    def __init__(self, inner: Any, failures: int) -> None:
        self._inner = inner
        self.failures = failures
        self.refused = 0

    def commit(self, slot: Any, attempt_id: Any) -> Any:
        if self.refused < self.failures:
            self.refused += 1
            raise StoreUnavailable("run store is unavailable while committing a slot "
                                   "(connection refused)")
        return self._inner.commit(slot, attempt_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RefusingDispatchRecords(RefusingCommits):
    """The store goes away just before a request would leave: its dispatch record fails."""

    def commit(self, slot: Any, attempt_id: Any) -> Any:
        return self._inner.commit(slot, attempt_id)

    def take_attempt(self, attempt_id: int, owner: str) -> bool:
        if self.refused < self.failures:
            self.refused += 1
            raise StoreUnavailable("run store is unavailable while recording a dispatch "
                                   "(connection refused)")
        return bool(self._inner.take_attempt(attempt_id, owner))


def test_a_dispatch_record_refused_for_a_while_is_waited_for_not_a_stopped_run(
        tmp_path: Path) -> None:
    """Nothing was sent, so the call waits for the store; the wave's other calls, already
    paid, are not lost to a stopped run."""
    home = tmp_path / "home"
    services = open_services(settings_for(home), runner=ProcessRunner())
    services.store = RefusingDispatchRecords(services.store, 3)  # type: ignore[assignment]
    try:
        report = services.pipeline().run("r", script("crash_fanout"), {}, Envelope()
                                         ).to_json()
        assert report["status"] == "succeeded", report["error"]
        assert services.store.refused == 3
        attempts = services.store.list_attempts("r")
        assert all(a.status is AttemptStatus.SUCCEEDED and a.sent_at for a in attempts)
    finally:
        services.close()
    paid = [line["identity"] for line in provider_lines(home)]
    assert len(paid) == len(set(paid)) == len(attempts)


def _services(home: Path, failures: int, **settings: Any) -> Any:
    services = open_services(settings_for(home, **settings), runner=ProcessRunner())
    services.store = RefusingCommits(services.store, failures)  # type: ignore[assignment]
    return services


def test_a_commit_refused_for_a_while_is_retried_and_paid_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = _services(home, failures=4)
    try:
        report = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert report["status"] == "succeeded", report["error"]
        assert services.store.refused == 4
        assert len(services.store.list_slots("r")) == 2
        kinds = [e.kind for e in services.store.list_events("r")]
        assert "commit_recovered" in kinds
    finally:
        services.close()
    assert len(provider_lines(home)) == 2  # one paid call per identity
    assert list((home / "spool").glob("*")) == []  # the spool is emptied after the commit


def test_a_result_the_store_never_took_stays_spooled_and_drains_later(tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = _services(home, failures=10**6, commit_retry_seconds=0.5)
    try:
        report = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert report["status"] == "stopped"
        assert report["error"]["type"] == "StoreUnavailable"
        assert "kept in" in report["error"]["message"]
        assert len(list((home / "spool").glob("*.commit.json"))) == 1
        assert services.store.list_slots("r") == []

        services.store.failures = 0  # the store is back: a worker's drain commits it
        assert services.broker(Envelope()).drain_spool() == 1
        slots = services.store.list_slots("r")
        assert [str(s.identity) for s in slots] == ["orchestrate/#0@:0"]
        attempts = services.store.list_attempts("r")
        assert [a.status for a in attempts] == [AttemptStatus.SUCCEEDED]

        again = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert again["status"] == "succeeded"
        assert again["calls"]["replayed"] == 1
    finally:
        services.close()
    assert [line["identity"] for line in provider_lines(home)] == [
        "orchestrate/#0@:0", "orchestrate/#1@:0"]  # the first call was paid once


def test_reconcile_from_the_provider_log_instead_of_abandoning(tmp_path: Path) -> None:
    home = tmp_path / "home"
    services = _services(home, failures=10**6, commit_retry_seconds=0.2,
                         attempt_lease_seconds=0.5)
    try:
        services.pipeline().run("r", script("crash_seq"), {}, Envelope())
        for path in (home / "spool").glob("*"):
            path.unlink()  # the worker's disk is lost too: only the provider log is left
        services.store.failures = 0
        time.sleep(2.1)  # the owner (this process) is alive: its lease gets 4 periods
        assert sweep(services.store, 0.5)
        log_path = home / "provider-log.jsonl"
        with pytest.raises(InputError, match="no attempt"):
            result_from_log(services.store, log_path, "other", "orchestrate/#0@:0")
        result = result_from_log(services.store, log_path, "r", "orchestrate/#0@:0")
        assert result["artifact"]["id"]
        reconcile_attempt(services.store, "r", "orchestrate/#0@:0", result=result,
                          operator="ana", reason="the provider log has it")
        again = services.pipeline().run("r", script("crash_seq"), {}, Envelope()).to_json()
        assert again["status"] == "succeeded"
        assert again["result"][0] == result["artifact"]["id"]
    finally:
        services.close()
    assert len(provider_lines(home)) == 2

"""`revise submit` on an existing run id resolves the stored inputs at the CLI layer, before
anything is queued (the queue client is replaced by a recorder; the store is real)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from broker.envelope import Budget, Envelope
from broker.settings import Settings
from broker.sqlstore import SqlStore
from orchestrator.inputs import args_bytes, envelope_bytes
from workers.cli import app

SCRIPT = 'async def orchestrate(ctx, args):\n    return 1\n'


class RecordingClient:
    """Stands in for ``workers.client.Client``: a real store, no Celery."""

    submitted: list[tuple[Any, Envelope, str]] = []

    def __init__(self, settings: Settings) -> None:
        self.store = SqlStore.open(settings.resolved_database_url)

    def submit(self, script: bytes, args: Any, envelope: Envelope, run_id: str, *,
               send: bool = True) -> Any:
        self.submitted.append((args, envelope, run_id))
        return SimpleNamespace(job_id="job-1", send=lambda: None)

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> type[RecordingClient]:
    import workers.client

    RecordingClient.submitted = []
    monkeypatch.setattr(workers.client, "Client", RecordingClient)
    return RecordingClient


def test_submit_reuses_the_stored_inputs_and_says_so(tmp_path: Path, client) -> None:
    home = tmp_path / "home"
    store = SqlStore.open(Settings(home=home).resolved_database_url)
    tight = Envelope(budget=Budget(max_calls=2))
    try:
        store.ensure_run("sub")
        store.add_revision("sub", "src", "h", args=args_bytes({"shots": ["a"]}),
                           envelope=envelope_bytes(tight))
        store.finish_revision("sub", 1, "failed", {})
    finally:
        store.close()
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = {"REVISE_HOME": str(home), "COLUMNS": "300"}
    result = CliRunner().invoke(app, ["submit", str(script), "--run-id", "sub", "--json"],
                                env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == "queued"
    assert client.submitted == [({"shots": ["a"]}, tight, "sub")]
    assert "reusing the args stored with revision 1 of run sub" in result.stderr
    assert "reusing the envelope stored with revision 1 of run sub" in result.stderr

    args = tmp_path / "args.json"
    args.write_text(json.dumps({"shots": ["b"]}))
    changed = CliRunner().invoke(app, ["submit", str(script), "--run-id", "sub", "--args",
                                       str(args), "--json"], env=env)
    assert changed.exit_code == 0, changed.output
    assert client.submitted[-1][0] == {"shots": ["b"]}
    assert "the args differ from the ones stored with revision 1 of run sub" in changed.stderr


def test_submit_on_a_new_run_uses_the_defaults_quietly(tmp_path: Path, client) -> None:
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    result = CliRunner().invoke(app, ["submit", str(script), "--run-id", "fresh"],
                                env={"REVISE_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert client.submitted == [({}, Envelope(), "fresh")]
    assert "note" not in result.stderr


def test_submit_while_a_revision_runs_is_refused_before_anything_is_queued(
        tmp_path: Path, client) -> None:
    """One revision of a run at a time (issue 29, item 4): said at submit, with how to wait."""
    home = tmp_path / "home"
    store = SqlStore.open(Settings(home=home).resolved_database_url)
    try:
        store.ensure_run("busy")
        store.add_revision("busy", "src", "h", args=args_bytes({}),
                           envelope=envelope_bytes(Envelope()))  # running, its lease fresh
    finally:
        store.close()
    script = tmp_path / "s.py"
    script.write_text(SCRIPT)
    env = {"REVISE_HOME": str(home), "COLUMNS": "300"}
    refused = CliRunner().invoke(app, ["submit", str(script), "--run-id", "busy"], env=env)
    assert refused.exit_code == 1 and client.submitted == []
    assert refused.stderr.strip().splitlines() == [
        "error: run 'busy' has revision 1 still running; one revision of a run runs at a "
        "time, so that two never pay for the same call. Wait for it (`revise show busy` "
        "shows it running until it ends) and submit again"]
    as_json = CliRunner().invoke(app, ["submit", str(script), "--run-id", "busy", "--json"],
                                 env=env)
    assert json.loads(as_json.stdout)["error"]["type"] == "RunBusy"
    # A revision whose runner is gone (its lease expired) does not hold the run.
    late = CliRunner().invoke(app, ["submit", str(script), "--run-id", "busy", "--json"],
                              env={**env, "REVISE_REVISION_LEASE_SECONDS": "0.001"})
    assert late.exit_code == 0, late.output
    assert client.submitted == [({}, Envelope(), "busy")]

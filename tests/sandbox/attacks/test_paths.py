"""Path attacks: run ids, job ids and artifact ids that are paths (or keys, or options),
through the CLI, the queue client, the dispatch message, the run store, the pipeline and
the artifact store. Each is refused with a clear error and creates nothing anywhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from broker.errors import InputError
from broker.settings import SandboxKind, Settings

HOSTILE_IDS = {
    "parent-escape": "../../x",
    "absolute": "/etc/passwd",
    "nested": "a/b",
    "backslash": "a\\..\\b",
    "dot": ".",
    "dot-dot": "..",
    "empty": "",
    "hidden": ".revise",
    "option": "--home=/tmp",
    "nul": "a\x00b",
    "newline": "run\n../x",
    "trailing-newline": "run\n",
    "space": "a b",
    "redis-glob": "run*",
    "redis-separator": "run:1",
    "tilde": "~root",
    "percent-encoded": "%2e%2e%2fx",
    "division-slash": "a\u2215b",
    "fullwidth": "\uff52\uff55\uff4e",
    "too-long": "x" * 129,
}
HOSTILE_ARTIFACT_IDS = {
    "parent-escape": "../../etc/passwd",
    "absolute": "/etc/passwd",
    "prefixed-escape": "sha256:../../../etc/passwd",
    "uri-escape": "artifact://../../etc/passwd",
    "short-hex": "sha256:abcd",
    "upper-hex": "sha256:" + "A" * 64,
    "trailing-newline": "sha256:" + "a" * 64 + "\n",
    "nul": "sha256:" + "a" * 63 + "\x00",
    "ref-dict-escape": {"id": "../x", "media_type": "image/png", "bytes": 1},
    "not-a-string": 12345,
}
SCRIPT = "async def orchestrate(ctx, args):\n    return 1\n"


def _tree(base: Path) -> set[Path]:
    return set(base.rglob("*"))


@pytest.fixture
def place(tmp_path: Path) -> dict[str, Path]:
    """A home three levels down, so an escape from its runs dir still lands in tmp_path."""
    home = tmp_path / "a" / "b" / "home"
    home.mkdir(parents=True)
    return {"base": tmp_path, "home": home}


@pytest.mark.parametrize("run_id", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_cli_refuses_hostile_run_ids(run_id: str, place, monkeypatch) -> None:
    from workers.cli import app

    script = place["base"] / "s.py"
    script.write_text(SCRIPT)
    monkeypatch.setenv("REVISE_HOME", str(place["home"]))
    monkeypatch.setenv("REVISE_SANDBOX", "process")
    before = _tree(place["base"])
    for argv in (["run", str(script), "--run-id", run_id, "--json"],
                 ["gate", str(script), "--run-id", run_id, "--json"],
                 ["show", run_id, "--json"], ["certificate", run_id, "--json"]):
        if argv[0] in ("show", "certificate") and run_id.startswith("-"):
            argv.insert(1, "--")
        result = CliRunner().invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert "Traceback" not in result.output
        if "--json" in argv and result.output.strip().startswith("{"):
            assert "is not allowed" in json.loads(result.output)["error"]["message"]
    assert _tree(place["base"]) == before


@pytest.mark.parametrize("run_id", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_store_and_pipeline_refuse_hostile_run_ids(run_id: str, place) -> None:
    from broker.envelope import Envelope
    from orchestrator.embedded import open_services
    from sandbox.runner import ProcessRunner

    services = open_services(Settings(home=place["home"], sandbox=SandboxKind.PROCESS),
                             runner=ProcessRunner())
    before = _tree(place["base"])
    try:
        with pytest.raises(InputError, match="is not allowed"):
            services.store.ensure_run(run_id)
        with pytest.raises(InputError, match="is not allowed"):
            services.pipeline().run(run_id, SCRIPT, {}, Envelope())
        assert services.store.get_run("ok-run") is None
        assert _tree(place["base"]) == before
    finally:
        services.close()


@pytest.mark.parametrize("bad", HOSTILE_IDS.values(), ids=HOSTILE_IDS.keys())
def test_dispatch_messages_refuse_hostile_run_and_job_ids(bad: str) -> None:
    from broker.envelope import Envelope
    from workers.messages import DispatchJob, InvalidMessage, check_task_id, parse_message

    job = {"run_id": "fine", "job_id": "fine", "script": SCRIPT, "args": {},
           "envelope": Envelope().model_dump(mode="json")}
    for field in ("run_id", "job_id"):
        with pytest.raises(InvalidMessage, match=r"is not allowed|must be a string"):
            parse_message(DispatchJob, {**job, field: bad}, "job")
    with pytest.raises(InvalidMessage, match="is not allowed"):
        check_task_id(bad, "dispatch task")
    assert parse_message(DispatchJob, job, "job").run_id == "fine"


@pytest.mark.redis
@pytest.mark.parametrize("run_id", list(HOSTILE_IDS.values())[:12],
                         ids=list(HOSTILE_IDS.keys())[:12])
def test_queue_client_refuses_hostile_run_ids(run_id: str, place, redis_url: str) -> None:
    import uuid

    import redis

    from workers.client import Client
    from workers.config import WorkerSettings

    queue = WorkerSettings(queue_prefix=f"atk{uuid.uuid4().hex[:10]}-")
    client = Client(Settings(home=place["home"], redis_url=redis_url), queue=queue)
    try:
        with pytest.raises(InputError, match=r"^run id .* is not allowed"):
            client.submit(SCRIPT, {}, None, run_id)
        conn = redis.Redis.from_url(redis_url)
        try:
            assert conn.llen(client.app.routing.queue("dispatch")) == 0
        finally:
            conn.close()
    finally:
        client.close()


@pytest.mark.parametrize("artifact", HOSTILE_ARTIFACT_IDS.values(),
                         ids=HOSTILE_ARTIFACT_IDS.keys())
def test_artifact_store_refuses_ids_that_are_paths(artifact, place) -> None:
    from broker.artifacts import FileArtifactStore

    victim = place["base"] / "a" / "victim"
    victim.write_text("host only")
    store = FileArtifactStore(place["home"] / "artifacts")
    store.put(b"\x89PNG fine", "image/png")
    before = _tree(place["base"])
    with pytest.raises(InputError, match="artifact"):
        store.get(artifact)
    for method in (store.exists, store.path):
        if isinstance(artifact, str):
            with pytest.raises(InputError, match="not an artifact id"):
                method(artifact)
    assert _tree(place["base"]) == before

"""Issue 15: the deployment across two hosts that share only Redis, PostgreSQL and S3."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time

import pytest

from broker.envelope import Envelope
from broker.owner import owner_alive
from broker.records import AttemptStatus
from orchestrator.reconcile import reconcile_attempt

from ..workers.conftest import script, wait_for
from .conftest import HOST_A, HOST_B, provider_log, revise, share_object_store

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SHOTS = {"shots": ["a", "b", "c", "d"]}  # N = 4 calls; the last one fails


def test_a_fanout_and_its_repair_across_two_hosts(make_stack, s3_env, tmp_path) -> None:
    stack = make_stack()
    share_object_store(stack, s3_env)
    stack.worker("dispatch", host=HOST_A)
    stack.worker("sandbox", pool="prefork", concurrency=2, host=HOST_A)
    stack.worker("capabilities", concurrency=4, host=HOST_B)
    stack.wait_ready(60)

    first = stack.client.submit(script("fanout_v1"), SHOTS, Envelope(), "R").wait(120)
    assert first["calls"]["executed"] == 4 and first["status"] == "failed"

    # The operator's machine: asks the model, gates here, runs through the queue.
    answers = tmp_path / "answers.jsonl"
    answers.write_text(json.dumps({"purpose": "repair", "output": "```python\n"
                                   + script("fanout_repaired") + "\n```"}) + "\n")
    operator = tmp_path / "operator"
    repaired = revise(stack, operator, "repair", "--run-id", "R", "--model",
                      f"recorded:{answers}", "--execute", "--timeout", "120", "--json")
    assert (repaired["via"], repaired["outcome"]) == ("queue", "succeeded")
    run = repaired["run"]
    assert (run["calls"]["replayed"], run["calls"]["executed"]) == (3, 1)
    assert run["revision"] == 2

    paid = provider_log(stack.tmp_path / HOST_B)
    assert len(paid) == len(SHOTS["shots"]) + 1, "N + 1 paid calls, all on host B"
    for home in (stack.tmp_path / HOST_A, operator):
        assert provider_log(home) == [], f"nothing paid from {home.name}"
    assert not (stack.tmp_path / HOST_B / "artifacts").exists(), "bytes went to S3"
    owners = {a.owner.split(":")[1] for a in stack.store.list_attempts("R")}
    assert owners == {HOST_B}

    third = tmp_path / "third"  # neither host: fetch every image from the object store
    for artifact in run["result"]:
        got = revise(stack, third, "artifact", "get", artifact, "-o",
                     str(third / "image.png"), "--json")
        data = (third / "image.png").read_bytes()
        assert f"sha256:{hashlib.sha256(data).hexdigest()}" == artifact
        assert got["store"].startswith("s3://")
    shown = revise(stack, third, "show", "R", "--json")
    assert {a["id"] for a in shown["artifacts"]} == set(run["result"])


def test_a_broker_worker_killed_on_host_b_is_recovered_by_the_lease(make_stack, s3_env,
                                                                    tmp_path) -> None:
    lease = 6.0
    stack = make_stack(visibility_timeout=5, unacked_restore_seconds=1, reconcile_interval=1)
    share_object_store(stack, s3_env)
    stack.env["REVISE_ATTEMPT_LEASE_SECONDS"] = str(lease)
    stack.worker("dispatch", host=HOST_A)
    stack.worker("sandbox", pool="prefork", concurrency=1, host=HOST_A)
    stack.worker("reconcile", concurrency=1, beat=True, host=HOST_A)
    doomed = stack.worker("capabilities", concurrency=2, host=HOST_B,
                          env={"REVISE_CELERY_LOCAL_LATENCY": "60"})
    stack.wait_ready(60)

    handle = stack.client.submit(script("crash_seq"), {}, Envelope(), "run-crash")
    # Claimed on host A (the sandbox job asks), then taken by host B as its request leaves.
    pending = wait_for(lambda: [a for a in stack.store.list_attempts(
        "run-crash", frozenset({AttemptStatus.PENDING})) if a.sent_at is not None], 60,
        "the attempt taken by host B's broker worker")
    owner = pending[0].owner
    assert owner.split(":")[1] == HOST_B
    assert owner_alive(owner) is None, "host B's owner must not be judged from elsewhere"
    wait_for(lambda: provider_log(stack.tmp_path / HOST_B), 30,
             "the intent line written before the provider call")
    os.killpg(doomed.pid, signal.SIGKILL)  # the broker worker dies inside the provider call
    doomed.wait(10)
    killed = time.monotonic()

    # Host A's reconciler sweeps every second, but the owner's pid means nothing there:
    # the attempt stays pending until its heartbeat lease runs out.
    time.sleep(2)
    assert [a.status for a in stack.store.list_attempts("run-crash")] == [
        AttemptStatus.PENDING]
    wait_for(lambda: stack.store.list_attempts(
        "run-crash", frozenset({AttemptStatus.UNRESOLVED})), 30, "the lease to expire")
    event = stack.events("run-crash", "attempt_unresolved")[0]
    assert (event.created_at - pending[0].heartbeat_at).total_seconds() >= lease
    recovered = time.monotonic() - killed
    print(f"\nhost B worker killed; attempt unresolved by the lease after {recovered:.1f} s "
          f"(lease {lease:g} s, heartbeat every {lease / 3:g} s, sweep every 1 s)")

    stack.worker("capabilities", concurrency=2, index=1, host=HOST_B)
    stopped = handle.wait(90)  # the redelivered call answers without a provider call
    assert stopped["error"]["type"] == "AttemptUnresolved"
    (killed_call,) = provider_log(stack.tmp_path / HOST_B)  # the request left, no answer
    assert (killed_call["identity"], killed_call["outcome"]) == ("orchestrate/#0@:0", "sent")
    decision = reconcile_attempt(stack.store, "run-crash", "orchestrate/#0@:0",
                                 operator="ana", reason="the provider has no record of it")
    assert decision["decision"] == "abandoned"
    again = stack.client.submit(script("crash_seq"), {}, Envelope(), "run-crash").wait(90)
    assert again["status"] == "succeeded" and again["calls"]["executed"] == 2
    assert [e["outcome"] for e in provider_log(stack.tmp_path / HOST_B)] == ["sent", "ok", "ok"]

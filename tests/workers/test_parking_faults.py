"""What can go wrong while a job waits (issue 26): its resumer dies, it waits in a race,
another submit or repair arrives, and it runs in either sandbox. Every call is paid once."""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

from broker.envelope import Envelope
from broker.prefix import RACE
from broker.records import JobStatus
from tests.fakes.openai_server import FAKE_API_KEY, IMAGES, FakeOpenAIServer, slow

from .conftest import script, wait_for
from .test_parking import SEQUENTIAL

pytestmark = [pytest.mark.redis, pytest.mark.postgres, pytest.mark.timeout(300)]

# Short leases and a frequent sweep, so a dead worker is found within seconds.
LIVENESS = {"REVISE_ATTEMPT_LEASE_SECONDS": "10", "REVISE_REVISION_LEASE_SECONDS": "10",
            "REVISE_REQUEUE_AFTER_SECONDS": "5", "REVISE_MAX_REQUEUES": "3"}


def _stack(make_stack, *, latency: float = 1.5, sandbox: str | None = None, sweep=False):
    stack = make_stack(local_latency=latency, park_after_seconds=0.2, reconcile_interval=1)
    stack.env.update(LIVENESS)
    if sandbox is not None:
        stack.env["REVISE_SANDBOX"] = sandbox
    stack.worker("dispatch")
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=16)
    if sweep:
        stack.worker("reconcile", concurrency=1, beat=True)
    stack.wait_ready(120)
    return stack


def _paid_once(stack) -> Counter:
    paid = Counter((e["run_id"], e["identity"]) for e in stack.provider_log())
    assert all(n == 1 for n in paid.values()), f"paid twice: {paid}"
    return paid


def test_a_resumed_job_whose_sandbox_worker_is_killed_runs_again_and_pays_once(
        make_stack) -> None:
    stack = _stack(make_stack, sweep=True)
    handle = stack.client.submit(SEQUENTIAL, {"prompts": ["a", "b", "c"]}, Envelope(),
                                 "killed")

    def resuming():
        job = stack.store.job_for_revision("killed", 1)
        return job is not None and job.resumes >= 1 and job.status is JobStatus.STARTED

    wait_for(resuming, 90, "a resume of the parked job to start")
    sandbox = next(p for p in stack.procs if "sandbox0" in " ".join(map(str, p.args)))
    os.killpg(sandbox.pid, signal.SIGKILL)
    sandbox.wait(30)
    stack.worker("sandbox", pool="prefork", concurrency=1, index=1)
    report = handle.wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 3 and report["calls"]["replayed"] == 0
    assert len(_paid_once(stack)) == 3
    resumed = stack.events("killed", "job_resumed")
    assert resumed, "the sweep never resumed the job whose sandbox worker died"
    assert "is gone" in resumed[0].message
    assert stack.store.get_revision("killed", 1).status == "succeeded"
    assert [r.revision for r in stack.store.list_revisions("killed")] == [1]


def test_a_parked_race_resumes_with_one_winner_and_replays_it_in_the_next_revision(
        make_stack) -> None:
    stack = _stack(make_stack)
    race = script("race_v1")
    first = stack.client.submit(race, {}, Envelope(), "race").wait(180)
    assert first["status"] == "succeeded", first["error"]
    assert isinstance(first["result"], str) and first["result"]
    paid = len(_paid_once(stack))
    assert 1 <= paid <= 3
    assert stack.store.job_for_revision("race", 1).resumes >= 1, "the race never parked"
    again = stack.client.submit(race, {}, Envelope(), "race").wait(180)
    assert again["status"] == "succeeded", again["error"]
    assert again["result"] == first["result"]  # the committed winner, not a new race
    assert len(_paid_once(stack)) == paid


SLOW_AND_FAST = """async def orchestrate(ctx, args):
    won = await ctx.race([ctx.run("image.generate", {"prompt": "slow"}),
                          ctx.run("image.generate", {"prompt": "fast"})])
    return won["artifact"]["id"]
"""


def test_a_parked_race_is_won_by_the_first_answer(make_stack) -> None:
    """Both branches of a race are answered while its job is parked: on resume the first
    answer still wins (it would have live), not the first branch; the decision is reported
    once, as a live one is (not as a replay)."""
    def by_prompt(request, server):
        # both answer after the job parked (at 0.2 s); the fast one first
        return slow(5.0 if request.body.get("prompt") == "slow" else 1.0)(request, server)

    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, by_prompt, by_prompt)
        stack = make_stack(park_after_seconds=0.2, reconcile_interval=1)
        stack.env.update({"REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL":
                          server.base_url, "REVISE_PROVIDER_API_KEY": FAKE_API_KEY})
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        stack.worker("capabilities", concurrency=4)
        stack.wait_ready(120)
        report = stack.client.submit(SLOW_AND_FAST, {}, Envelope(), "parked-race").wait(180)
        assert report["status"] == "succeeded", report["error"]
        assert stack.store.job_for_revision("parked-race", 1).resumes >= 1, "never parked"
        (race,) = [s for s in stack.store.list_slots("parked-race") if s.capability == RACE]
        assert race.result["index"] == 1, race.result
        fast = next(s for s in stack.store.list_slots("parked-race")
                    if s.identity.path == (1,))
        assert report["result"] == fast.result["artifact"]["id"]
        assert RACE not in [i["capability"] for i in report["identities"]]
        assert server.charged() == 2


RACE_THEN_RETURN = """async def orchestrate(ctx, args):
    won = await ctx.race([ctx.run("image.generate", {"prompt": "slow"}),
                          ctx.run("image.generate", {"prompt": "fast"})])
    return won["artifact"]["id"]
"""


def test_a_race_loser_lost_with_its_broker_worker_keeps_the_script_s_result(
        make_stack) -> None:
    """The script returned the winner; the loser, still at the provider, is lost with its
    broker worker and ends unresolved (paid until an operator or the provider's lookup
    says otherwise). The revision keeps the script's result and says what happened to the
    loser, instead of ending stopped with the paid result thrown away."""
    def by_prompt(request, server):
        return slow(60.0 if request.body.get("prompt") == "slow" else 0.5)(request, server)

    with FakeOpenAIServer(api_key=FAKE_API_KEY) as server:
        server.queue(IMAGES, by_prompt, by_prompt)
        stack = make_stack(park_after_seconds=60, reconcile_interval=1)
        stack.env.update(LIVENESS)
        stack.env.update({"REVISE_PROVIDER": "http", "REVISE_PROVIDER_BASE_URL":
                          server.base_url, "REVISE_PROVIDER_API_KEY": FAKE_API_KEY})
        stack.worker("dispatch")
        stack.worker("sandbox", pool="prefork", concurrency=1)
        broker = stack.worker("capabilities", concurrency=4)
        stack.wait_ready(120)
        handle = stack.client.submit(RACE_THEN_RETURN, {}, Envelope(), "lost-loser")
        wait_for(lambda: [s for s in stack.store.list_slots("lost-loser")
                          if s.capability == RACE], 60, "the race decided")
        os.killpg(broker.pid, signal.SIGKILL)
        broker.wait(10)
        report = handle.wait(120)
        assert report["status"] == "succeeded", report["error"]
        fast = next(s for s in stack.store.list_slots("lost-loser") if s.identity.path == (1,))
        assert report["result"] == fast.result["artifact"]["id"]
        assert report["calls"]["uncertain"] == 1
        assert any("after the script returned its result" in w and "unresolved" in w
                   for w in report["warnings"]), report["warnings"]


def test_a_job_parks_and_resumes_in_the_process_sandbox_too(make_stack) -> None:
    """The stack tests run in Docker where an engine runs (CI); parking is the same in
    the bubblewrap sandbox."""
    stack = _stack(make_stack, sandbox="process")
    report = stack.client.submit(SEQUENTIAL, {"prompts": ["p", "q"]}, Envelope(),
                                 "bwrap").wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 2 and len(_paid_once(stack)) == 2
    assert stack.store.job_for_revision("bwrap", 1).resumes >= 1, "it never parked"


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_sandbox_worker_stopped_by_its_supervisor_loses_no_run(make_stack, stop) -> None:
    """honcho (``kill %1``) and Ctrl-C stop a stack by signalling each role's process
    group. That is no failure of the run (it ended ``stopped`` or ``failed``): the worker
    finishes its job (SIGINT: a warm shutdown), or, its pool process told to exit mid-job
    (SIGTERM), the job resumes on the next sandbox worker; every call is paid once."""
    stack = make_stack(local_latency=1.0, park_after_seconds=60)
    stack.worker("dispatch")
    sandbox = stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready(120)
    handle = stack.client.submit(SEQUENTIAL, {"prompts": ["a", "b", "c"]}, Envelope(),
                                 "stopped-stack")
    wait_for(lambda: len(stack.provider_log()) >= 1, 60, "the first call")
    os.killpg(sandbox.pid, stop)
    sandbox.wait(60)
    assert stack.store.get_run("stopped-stack").status.value in ("running", "succeeded")
    stack.worker("sandbox", pool="prefork", concurrency=1, index=1)
    report = handle.wait(120)
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 3 and len(_paid_once(stack)) == 3

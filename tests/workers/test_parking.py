"""Jobs that wait hold nothing (issue 26): a sandbox job whose calls are all in flight
at broker workers parks (its sandbox and its process are given back) and resumes when
they are settled; it is still one revision, every call paid once."""

from __future__ import annotations

import time

import pytest

from broker.envelope import Envelope
from broker.errors import RunBusy
from broker.providers import ProviderLog
from broker.providers.log import peak_in_flight
from broker.records import JobStatus

from .conftest import script

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

SEQUENTIAL = '''
async def orchestrate(ctx, args):
    out = []
    for prompt in args["prompts"][:4]:
        image = await ctx.run("image.generate", {"prompt": prompt})
        out.append(image["artifact"]["id"])
    return out
'''
FANOUT = '''
async def orchestrate(ctx, args):
    async def gen(prompt):
        return await ctx.run("image.generate", {"prompt": prompt})

    images = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
    return [i["artifact"]["id"] for i in images[:8]]
'''


def _stack(make_stack, *, latency: float = 1.5, slots: int = 1, pool: str = "prefork",
           **parking: float | None):
    """``parking``: the park settings (default: park after 0.2 s whatever the load);
    None is `none`."""
    stack = make_stack(local_latency=latency)
    for name, value in (parking or {"park_after_seconds": 0.2}).items():
        stack.env[f"REVISE_CELERY_{name.upper()}"] = "none" if value is None else str(value)
    stack.worker("dispatch")
    stack.worker("sandbox", pool=pool, concurrency=slots)
    stack.worker("capabilities", concurrency=16)
    stack.wait_ready(120)
    return stack


def test_a_waiting_job_parks_and_resumes_paying_each_call_once(make_stack) -> None:
    stack = _stack(make_stack)
    prompts = {"prompts": ["a", "b", "c"]}
    report = stack.client.submit(SEQUENTIAL, prompts, Envelope(), "parks").wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert len(report["result"]) == 3
    assert report["calls"]["executed"] == 3 and report["calls"]["replayed"] == 0
    assert [i["outcome"] for i in report["identities"]] == ["executed"] * 3
    assert len(stack.provider_log()) == 3
    parked = [e for e in stack.store.list_events("parks") if e.kind == "parked"]
    assert len(parked) >= 2  # it gave its slot back while each call was in flight
    job = stack.store.job_for_revision("parks", 1)
    assert job.status is JobStatus.FINISHED and job.resumes == len(parked)


def test_one_sandbox_slot_keeps_several_jobs_in_flight(make_stack) -> None:
    """With one sandbox slot and calls of 3 s, four jobs of two calls would hold the slot
    one after the other; parked, their calls overlap at the broker workers."""
    stack = _stack(make_stack, latency=3.0)
    handles = [stack.client.submit(SEQUENTIAL, {"prompts": [f"{n}a", f"{n}b"]}, Envelope(),
                                   f"many-{n}") for n in range(4)]
    started = time.monotonic()
    reports = [h.wait(240) for h in handles]
    assert all(r["status"] == "succeeded" for r in reports), [r["error"] for r in reports]
    assert len(stack.provider_log()) == 8
    peak = peak_in_flight(ProviderLog(stack.settings.provider_log_path).lines())
    assert peak >= 2, f"the provider never saw two jobs' calls at once (peak {peak})"
    elapsed = time.monotonic() - started
    assert elapsed > 0  # the makespan is the bench's to compare, never asserted here


def test_a_parked_fanout_resumes_with_every_branch_paid_once(make_stack) -> None:
    stack = _stack(make_stack)
    prompts = {"prompts": [f"shot {i}" for i in range(6)]}
    report = stack.client.submit(FANOUT, prompts, Envelope(), "wide").wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert report["calls"]["executed"] == 6 and len(stack.provider_log()) == 6


def test_a_second_submit_while_parked_is_refused(make_stack) -> None:
    stack = _stack(make_stack, latency=3.0)
    first = stack.client.submit(SEQUENTIAL, {"prompts": ["x", "y"]}, Envelope(), "busy")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = stack.store.job_for_revision("busy", 1)
        if job is not None and job.status is JobStatus.PARKED:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the job never parked")
    with pytest.raises(RunBusy, match="revision 1 still running"):
        stack.client.submit(script("crash_seq"), {}, Envelope(), "busy").wait(60)
    report = first.wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert len(stack.provider_log()) == 2


def _load_stack(make_stack):
    """One sandbox slot; a job parks only when another waits for that slot."""
    return _stack(make_stack, latency=2.0, pool="threads", park_after_seconds=None,
                  park_under_load_after_seconds=0.2)


def test_a_job_alone_keeps_its_sandbox_while_it_waits(make_stack) -> None:
    stack = _load_stack(make_stack)
    report = stack.client.submit(SEQUENTIAL, {"prompts": ["a", "b"]}, Envelope(),
                                 "alone").wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert stack.store.job_for_revision("alone", 1).resumes == 0
    assert not [e for e in stack.store.list_events("alone") if e.kind == "parked"]


def test_a_job_parks_for_one_that_waits_for_its_slot(make_stack) -> None:
    stack = _load_stack(make_stack)
    handles = [stack.client.submit(SEQUENTIAL, {"prompts": [f"{n}a", f"{n}b"]}, Envelope(),
                                   f"load-{n}") for n in range(2)]
    reports = [h.wait(240) for h in handles]
    assert all(r["status"] == "succeeded" for r in reports), [r["error"] for r in reports]
    assert all(r["calls"]["executed"] == 2 for r in reports)
    assert len(stack.provider_log()) == 4
    resumes = [stack.store.job_for_revision(f"load-{n}", 1).resumes for n in range(2)]
    assert sum(resumes) >= 1, "no job gave the slot to the one waiting for it"
    peak = peak_in_flight(ProviderLog(stack.settings.provider_log_path).lines())
    assert peak == 2, f"the two jobs' calls never overlapped (peak {peak})"


def test_as_many_jobs_park_as_wait_for_a_slot(make_stack) -> None:
    """Three slots, four jobs of one slow call: one job waits, so one job parks for it,
    not all three (each park costs a resume: a sandbox start and a replay)."""
    stack = _stack(make_stack, latency=3.0, slots=3, pool="threads",
                   park_after_seconds=None, park_under_load_after_seconds=0.2)
    handles = [stack.client.submit(SEQUENTIAL, {"prompts": [f"{n}"]}, Envelope(),
                                   f"slots-{n}") for n in range(4)]
    reports = [h.wait(240) for h in handles]
    assert all(r["status"] == "succeeded" for r in reports), [r["error"] for r in reports]
    assert len(stack.provider_log()) == 4
    resumes = sum(stack.store.job_for_revision(f"slots-{n}", 1).resumes for n in range(4))
    # One park for the waiting job; a second only if a woken job found every slot taken.
    assert 1 <= resumes <= 2, f"{resumes} resumes for one job that waited for a slot"


def test_a_call_that_queued_for_a_broker_does_not_park_on_its_queueing(make_stack) -> None:
    """A job parks when its calls have been in flight at broker workers long enough, not
    when they waited in the queue for one: here the only broker worker starts after the
    park threshold has passed since the call was sent, and the call, answered 1 s after a
    broker takes it, is back before the threshold counted from the take."""
    stack = make_stack(local_latency=1.0)
    stack.env["REVISE_CELERY_PARK_AFTER_SECONDS"] = "3"
    stack.worker("dispatch")
    stack.worker("sandbox", concurrency=2)
    stack.wait_ready(120)
    handle = stack.client.submit(SEQUENTIAL, {"prompts": ["a"]}, Envelope(), "queued")
    deadline = time.monotonic() + 60
    while not stack.store.list_attempts("queued") and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(4)  # the claimed call waits in the queue past the park threshold
    stack.worker("capabilities", concurrency=4)
    report = handle.wait(180)
    assert report["status"] == "succeeded", report["error"]
    assert stack.store.job_for_revision("queued", 1).resumes == 0
    assert not [e for e in stack.store.list_events("queued") if e.kind == "parked"]

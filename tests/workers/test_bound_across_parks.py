"""A hostile sandbox (checker bypassed) in a deployment: the host's bound on the calls at
a site (``Site.max_calls``) is kept per sandbox session, and a parked job resumes in a new
session, so a site the admitted script can call once is paid once per park."""

from __future__ import annotations

import time
import uuid

import pytest

from broker.envelope import Budget, Envelope, SandboxLimits

from .conftest import wait_for

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

_SITE = "orchestrate/if0/#0>orchestrate/if0.one/#0"

# ``one()`` is called once at most (max_calls 1); its awaitable is held in a dict, so the
# host knows no fanout shape for it. The hostile part asks for that call once per
# session, at a fanout path of its own (each a new identity), and waits for the answer.
_BODY = '''
if args.get("never"):
    async def one():
        return await ctx.run("text.generate", {"prompt": "p"})
    box = {"k": one()}
    await box["k"]
sched = g["_SCHEDULER"]
index = imp("time").time_ns() // 1000 % 900000
sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
    {"seq": 1, "kind": "call", "site": "SITE", "path": [index], "occurrence": 0,
     "capability": "text.generate", "payload": {"prompt": "p" + str(index)}, "take": 1}]})
return sched.channel.receive()
'''.replace("SITE", _SITE)


def test_a_site_called_once_is_paid_once_across_parks(make_stack, monkeypatch) -> None:
    import orchestrator.admission as admission_module
    from orchestrator.checker import CheckReport
    from orchestrator.pipeline import Pipeline
    from workers.recovery import sandbox_task_id
    from workers.routing import SANDBOX_TASK, enqueue

    from ..sandbox.attacks.corpus import script

    stack = make_stack(local_latency=1.5)
    stack.env["REVISE_CELERY_PARK_AFTER_SECONDS"] = "0.2"
    stack.worker("sandbox", pool="prefork", concurrency=1)
    stack.worker("capabilities", concurrency=4)
    stack.wait_ready(120)
    # The checker bypassed, as a dispatcher would record the job otherwise.
    monkeypatch.setattr(admission_module, "check", lambda text: CheckReport.from_violations([]))
    envelope = Envelope(budget=Budget(max_calls=4), sandbox=SandboxLimits(timeout_seconds=30))
    job_id = f"job-{uuid.uuid4().hex[:12]}"

    def sandbox_job(admitted):
        return job_id, {"job_id": job_id, "run_id": admitted.run_id,
                        "revision": admitted.revision, "source": admitted.source.text,
                        "admission": admitted.admission.to_wire(),
                        "args_text": admitted.args_text,
                        "envelope": envelope.model_dump(mode="json")}

    pipeline = Pipeline(store=stack.store, runner=None, settings=stack.settings,
                        executor_for=None)
    admitted = pipeline.admit("parks-bound", script(_BODY), {}, envelope, job=sandbox_job)
    assert admitted.admission is not None
    (site,) = [s for s in admitted.admission.sites if s.site == _SITE]
    assert site.max_calls == 1
    message = stack.store.get_job(job_id).message
    enqueue(stack.client.app, SANDBOX_TASK, stack.client.app.routing.queue("sandbox"),
            task_id=sandbox_task_id(job_id), args=[message])

    def ended():
        revision = stack.store.get_revision("parks-bound", admitted.revision)
        return revision if revision.status not in ("running", "parked") else None

    revision = wait_for(ended, 150, "the revision to end")
    time.sleep(1)
    paid = [e for e in stack.provider_log() if e.get("run_id") == "parks-bound"]
    parks = stack.events("parks-bound", "parked")
    assert len(paid) <= site.max_calls, (
        f"{len(paid)} provider calls at a site the admitted script calls at most once "
        f"({len(parks)} parks; revision {revision.status}: "
        f"{(revision.summary or {}).get('error')})")

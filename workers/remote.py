"""The executor a sandbox worker's revision uses: each new call becomes one capability task.

Only new work travels: replays and divergences are decided on the sandbox
worker from the prefix it loaded (``orchestrator.session``). ``RemoteExecutor``
sends ``CallRequest.to_wire()`` to the ``capabilities`` queue and waits for the
``CallReport``. Celery moves single calls only: fanout, joins and ordering stay
in the sandbox runtime and the run store (no chords or groups, whose joins and
error callbacks we cannot make exactly-once).

The task id is derived from (job, identity), so a redelivered sandbox job that
asks for the same call again gets the same task, whose stored answer is
returned without another provider call (see ``workers.capability``).

Why waiting here cannot deadlock: the sandbox worker waits only on tasks of the
``capabilities`` queue, which sandbox workers never consume (``-Q sandbox``);
those tasks run in separate broker worker processes that never wait on
anything queued. Each wait is bounded by ``capability_wait_seconds``.
"""

from __future__ import annotations

import time
from typing import Any

from celery import Celery
from celery.exceptions import TimeoutError as CeleryTimeout

from broker.calls import CallReport, CallRequest, Outcome
from broker.envelope import Envelope
from broker.errors import AttemptInFlight, BrokerError
from broker.outage import is_queue_outage, queue_unavailable
from workers.outcome import answer_of
from workers.routing import CAPABILITY_TASK, Routing


def capability_task_id(job_id: str, request: CallRequest) -> str:
    return f"{job_id}/call/{request.identity}"


class RemoteExecutor:
    def __init__(self, *, app: Celery, routing: Routing, envelope: Envelope, job_id: str,
                 wait_seconds: float, delivery: int = 1) -> None:
        self.app = app
        self.routing = routing
        self.job_id = job_id
        self.wait_seconds = wait_seconds
        self.delivery = delivery
        self._envelope_wire = envelope.model_dump(mode="json")
        self.timings: list[float] = []

    def execute(self, request: CallRequest) -> CallReport:
        started = time.perf_counter()
        action = f"sending the call at {request.identity}"
        try:
            result = self.app.send_task(
                CAPABILITY_TASK, args=[request.to_wire(), self._envelope_wire, self.delivery],
                task_id=capability_task_id(self.job_id, request),
                queue=self.routing.queue("capabilities"))
            action = f"waiting for the answer to the call at {request.identity}"
            answer: Any = result.get(timeout=self.wait_seconds, propagate=False,
                                     disable_sync_subtasks=False)
        except CeleryTimeout:
            return self._no_answer(request, f"no answer within {self.wait_seconds:.0f} s")
        except Exception as exc:
            if not is_queue_outage(exc):
                raise
            return self._outage(request, action, exc)
        finally:
            self.timings.append(time.perf_counter() - started)
        if result.failed():
            carried = answer_of(answer)  # a failed, denied or stopped call (workers.outcome)
            if carried is not None:
                return CallReport.from_wire(carried)
            raise BrokerError(f"capability task for {request.identity} failed: {answer!r}",
                              identity=str(request.identity))
        return CallReport.from_wire(answer)

    def _outage(self, request: CallRequest, action: str, exc: Exception) -> CallReport:
        """Redis is down: the call may or may not have been queued; stop, fail closed."""
        stop = queue_unavailable(str(self.app.conf.broker_url), action, exc,
                                 identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

    def _no_answer(self, request: CallRequest, why: str) -> CallReport:
        stop = AttemptInFlight(
            f"the capability queue gave {why} for {request.identity}; the call may still "
            "complete and commit. Check that broker workers (-Q capabilities) are running, "
            "then submit again: a committed call replays", identity=str(request.identity))
        return CallReport(request.identity, request.capability, Outcome.STOPPED, stop=stop,
                          error=stop.to_json())

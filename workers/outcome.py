"""What a task's Celery state says about the run it served, so Flower tells the truth.

A job task (``revise.dispatch`` for a candidate refused before any sandbox,
``revise.sandbox`` for one that ran) ends as Celery ``FAILURE`` when its
revision failed or stopped, and as ``SUCCESS`` with the run summary as result
when it succeeded. A capability task ends as ``FAILURE`` when a call it executed
failed at the provider or was stopped; its message names that call and says how
many of its calls did get a result. A job's report is stored (run store and job
lease) *before* the exception is raised, so nothing is lost and a redelivery raises
the same exception again from the stored answer; a capability task's answers are
in the run store, where the side that asked reads them.

The exceptions carry the Revise error's type, message and identity and the
answer itself in ``args``: Celery's JSON result backend keeps only ``args``
and rebuilds the exception with ``cls(*args)``, and the asking side (queue
client, sandbox worker) reads the answer back from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.calls import CallReport
from broker.errors import IdentityText, QueueError, positional
from broker.records import RevisionStatus

if TYPE_CHECKING:
    from pydantic import JsonValue

# Call outcomes that leave the call without a committed result.
FAILED_CALL_OUTCOMES = frozenset({"failed", "diverged", "denied", "stopped"})


class TaskOutcome(QueueError):
    """Base of the exceptions a task raises to end as FAILURE after storing its answer."""

    code = "task_outcome"
    # Built by position: the Revise error's type, the call or revision it concerns, and
    # the stored answer the asking side reads back.
    error_type: str | None = positional(default=None, kw_only=False)
    identity: IdentityText | None = positional(default=None, kw_only=False)
    run_id: str | None = positional(default=None, kw_only=False)
    revision: int | None = positional(default=None, kw_only=False)
    answer: dict[str, JsonValue] | None = positional(default=None, kw_only=False)

    def __str__(self) -> str:
        where = f" at {self.identity}" if self.identity else ""
        rev = "" if self.revision is None else f" revision {self.revision}"
        return f"{self.error_type or 'Error'}{where}: {self.message} (run {self.run_id}{rev})"

    def __repr__(self) -> str:  # what Flower shows in its task list
        return f"{type(self).__name__}({str(self)!r})"


class RunFailed(TaskOutcome):
    """The revision this job ran (or refused) ended ``failed``."""

    code = "run_failed"


class RunStopped(TaskOutcome):
    """The revision ended ``stopped``: a safety stop, a refused candidate, a gate rejection."""

    code = "run_stopped"


class CallFailed(TaskOutcome):
    """A capability call failed at the provider, was denied, diverged or was stopped."""

    code = "call_failed"


def run_outcome(answer: dict[str, Any], *, carry: dict[str, Any] | None = None
                ) -> TaskOutcome | None:
    """The exception for a job answer (``run_id``, ``revision``, ``status``, ``error``),
    or None when the run succeeded. It carries ``carry`` (default: the answer itself)."""
    status = answer.get("status")
    if status in (RevisionStatus.SUCCEEDED, RevisionStatus.PARKED):  # parked: it resumes
        return None
    error = answer.get("error") or {}
    cls = RunStopped if status == RevisionStatus.STOPPED else RunFailed
    message = str(error.get("message") or f"the run ended {status}")
    return cls(message, error.get("type"), error.get("identity"), answer.get("run_id"),
               answer.get("revision"), answer if carry is None else carry)


def wave_outcome(reports: list[CallReport], run_id: str, revision: int
                 ) -> CallFailed | None:
    """The exception for a capability task's calls, or None when every one of them got a
    result. It names the first call without one."""
    failed = [r for r in reports if str(r.outcome) in FAILED_CALL_OUTCOMES]
    if not failed:
        return None
    first = failed[0]
    error = first.error or {}
    more = f" (and {len(failed) - 1} more of its wave)" if len(failed) > 1 else ""
    # Flower shows the whole task as FAILURE: say how much of it did get a result.
    got = (f"; {len(reports) - len(failed)} of the task's {len(reports)} calls got a result"
           if len(reports) > 1 else "")
    message = f"{first.outcome}: {error.get('message') or 'no message'}{more}{got}"
    return CallFailed(message, error.get("type"), str(first.identity), run_id, revision)


def answer_of(exc: BaseException | None) -> dict[str, Any] | None:
    """The stored answer carried by a task's FAILURE (None for any other exception)."""
    return exc.answer if isinstance(exc, TaskOutcome) else None

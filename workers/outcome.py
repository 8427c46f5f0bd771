"""What a task's Celery state says about the run it served, so Flower tells the truth.

A job task (``revise.dispatch`` for a candidate refused before any sandbox,
``revise.sandbox`` for one that ran) ends as Celery ``FAILURE`` when its
revision failed or stopped, and as ``SUCCESS`` with the run summary as result
when it succeeded. A capability task ends as ``FAILURE`` when a call of its wave
failed at the provider, was denied, diverged or stopped; its message names that
call and says how many calls of the wave did get a result. The report is stored (run
store and job lease) *before* the exception is raised, so nothing is lost and
a redelivery raises the same exception again from the stored answer.

The exceptions carry the Revise error's type, message and identity and the
answer itself in ``args``: Celery's JSON result backend keeps only ``args``
and rebuilds the exception with ``cls(*args)``, and the asking side (queue
client, sandbox worker) reads the answer back from it.
"""

from __future__ import annotations

from typing import Any

from broker.errors import ReviseError

SUCCEEDED = "succeeded"
# Call outcomes that leave the call without a committed result.
FAILED_CALL_OUTCOMES = frozenset({"failed", "diverged", "denied", "stopped"})


class TaskOutcome(ReviseError):
    """Base of the exceptions a task raises to end as FAILURE after storing its answer."""

    code = "task_outcome"

    def __init__(self, message: str, error_type: str | None = None,
                 identity: str | None = None, run_id: str | None = None,
                 revision: int | None = None, answer: dict[str, Any] | None = None) -> None:
        super().__init__(message, error_type=error_type, identity=identity, run_id=run_id,
                         revision=revision, answer=answer)
        # Celery's JSON backend serializes ``args`` only; keep every field in them.
        self.args = (message, error_type, identity, run_id, revision, answer)

    def __str__(self) -> str:
        where = f" at {self.identity}" if self.identity else ""
        rev = "" if self.fields["revision"] is None else f" revision {self.fields['revision']}"
        return (f"{self.fields['error_type'] or 'Error'}{where}: {self.message} "
                f"(run {self.fields['run_id']}{rev})")

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
    if status in (SUCCEEDED, "parked"):  # parked: the job resumes, the run goes on
        return None
    error = answer.get("error") or {}
    cls = RunStopped if status == "stopped" else RunFailed
    message = str(error.get("message") or f"the run ended {status}")
    return cls(message, error.get("type"), error.get("identity"), answer.get("run_id"),
               answer.get("revision"), answer if carry is None else carry)


def wave_outcome(answer: dict[str, Any], run_id: str | None) -> CallFailed | None:
    """The exception for a capability task's answer (``{"reports": [...]}``), or None when
    every call of its wave got a result. It names the first call without one."""
    reports = [r for r in answer.get("reports") or [] if isinstance(r, dict)]
    failed = [r for r in reports if r.get("outcome") in FAILED_CALL_OUTCOMES]
    if not failed:
        return None
    first = failed[0]
    error = first.get("error") or first.get("stop") or {}
    more = f" (and {len(failed) - 1} more of its wave)" if len(failed) > 1 else ""
    # Flower shows the whole wave as FAILURE: say how much of it did get a result.
    got = (f"; {len(reports) - len(failed)} of the wave's {len(reports)} calls got a result"
           if len(reports) > 1 else "")
    message = f"{first['outcome']}: {error.get('message') or 'no message'}{more}{got}"
    return CallFailed(message, error.get("type"), first.get("identity"), run_id, None,
                      answer)


def answer_of(exc: BaseException | None) -> dict[str, Any] | None:
    """The stored answer carried by a task's FAILURE (None for any other exception)."""
    if isinstance(exc, TaskOutcome):
        answer = exc.fields.get("answer")
        return answer if isinstance(answer, dict) else None
    return None

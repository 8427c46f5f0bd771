"""The crash window: when an open attempt's owner is gone, and marking it unresolved.

The attempt record is durable before the provider is called, and so is its
dispatch record (``sent_at``, written just before the request leaves). An attempt
whose owner died before commit is *unresolved*: the provider may or may not have
done the work; one whose request never left is abandoned instead (nothing was
paid, the call may run again). Two mechanisms find them:

* in the owner's process table (same host, boot and pid namespace: see
  ``broker.owner``), a pending attempt whose owner process is gone (pid
  absent, or reused with another start time) is unresolved at once; an owner
  of any other table is never judged by pid;
* anywhere, a pending attempt whose heartbeat is older than
  ``attempt_lease_seconds`` (the owner beats every third of it while the
  provider call runs) is unresolved. Time the judge could not reach the store
  does not count: its owner could not renew either (a store outage is not a
  death), so after an outage the age counts from when the judge's store
  answered again (``RunStore.available_since``).

Whoever finds one first marks it (the broker claiming the identity again, the
sandbox job waiting for its answer, the reconciler's sweep); the store's
transition from pending is atomic, so exactly one of them reports it. An
operator then resolves it (``orchestrator.reconcile``).
"""

from __future__ import annotations

from datetime import UTC, datetime

from broker.errors import StoreError
from broker.owner import owner_alive
from broker.records import AttemptRecord, AttemptStatus
from broker.store import RunStore

# A live owner on this host renews every third of the lease; only a store outage delays
# it. Its lease is given this many periods before anything it holds is declared lost.
ALIVE_GRACE = 4


def lease_expired(owner: str | None, beat: datetime, lease_seconds: float,
                  now: datetime, *, store_since: datetime | None = None) -> bool:
    """Is the lease held by ``owner`` (last renewed at ``beat``) gone? A dead owner on this
    host at once; an owner elsewhere after the lease; a live one after ``ALIVE_GRACE``.

    ``store_since`` is when the judge saw the store answer again after an outage: nobody
    could renew a lease before then, so its age counts from there."""
    alive = owner_alive(owner) if owner else None
    if store_since is not None and store_since > beat:
        beat = store_since
    age = (now - beat).total_seconds()
    if alive is False:
        return True
    return age > lease_seconds * (ALIVE_GRACE if alive else 1)


def attempt_expired(attempt: AttemptRecord, lease_seconds: float,
                    now: datetime | None = None, *, store_since: datetime | None = None
                    ) -> bool:
    """Is a pending attempt's owner gone (the provider call may or may not have run)?"""
    return lease_expired(attempt.owner, attempt.heartbeat_at, lease_seconds,
                         now or datetime.now(UTC), store_since=store_since)


def mark_unresolved(store: RunStore, attempt: AttemptRecord, *, by: str, reason: str
                    ) -> AttemptRecord | None:
    """Mark a pending attempt unresolved and say so in the run's events; None when it is
    no longer pending (committed meanwhile, another finder marked it first, or its request
    was never sent: then it is abandoned, nothing was paid, and its call may run again)."""
    if attempt.sent_at is None and store.abandon_unsent(attempt.id, by=by):
        return None
    try:
        return store.resolve_attempt(
            attempt.id, AttemptStatus.UNRESOLVED, operator=by, reason=reason,
            event_of=lambda marked: ("attempt_unresolved", f"attempt #{marked.number} at "
                                     f"{marked.identity} never committed; an operator "
                                     "must reconcile it", {"attempt_id": marked.id}))
    except StoreError:
        return None

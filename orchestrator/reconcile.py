"""The crash window: finding unresolved attempts and the operator's decisions.

The attempt record is durable before the provider is called. An attempt whose
owner died before commit is *unresolved*: the provider may or may not have
done the work. Two mechanisms find them:

* on the owner's host, a pending attempt whose owner process is gone (pid
  absent, or reused with another start time) is unresolved at once;
* anywhere, a pending attempt whose heartbeat is older than
  ``attempt_lease_seconds`` (the owner beats every third of it while the
  provider call runs) is unresolved; the reconciler's periodic sweep marks it.

An operator resolves each one: write back the known result (the identity is
committed and replays from then on) or abandon it (the identity may execute
once more). Every decision is recorded with operator, reason and time.
"""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from broker.catalog import CATALOG
from broker.errors import InputError
from broker.identity import Identity
from broker.owner import owner_alive
from broker.providers.log import ProviderLog
from broker.records import (
    OPEN_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    RunStatus,
    SlotRecord,
)
from broker.store import RunStore
from orchestrator.certificate import build_certificate
from orchestrator.sites import assign_sites

_UNSET = object()


def sweep(store: RunStore, lease_seconds: float, *, now: datetime | None = None
          ) -> list[AttemptRecord]:
    """Mark pending attempts unresolved when their owner is gone or their lease expired.

    Idempotent and safe with two reconcilers: the store's transition from
    pending is atomic, so each attempt is reported by exactly one of them.
    """
    now = now or datetime.now(UTC)
    marked = store.mark_unresolved(now - timedelta(seconds=lease_seconds))
    for attempt in store.list_attempts(statuses=frozenset({AttemptStatus.PENDING})):
        if owner_alive(attempt.owner) is False:
            try:
                marked.append(store.resolve_attempt(
                    attempt.id, AttemptStatus.UNRESOLVED, operator="reconciler",
                    reason="owner process is gone"))
            except Exception:  # another reconciler got there first
                continue
    for attempt in marked:
        store.add_event(attempt.run_id, "attempt_unresolved",
                        f"attempt #{attempt.number} at {attempt.identity} never committed; "
                        "an operator must reconcile it", identity=attempt.identity,
                        revision=attempt.revision, data={"attempt_id": attempt.id})
        store.set_run_status(attempt.run_id, RunStatus.BLOCKED,
                             f"blocked: unresolved attempt at {attempt.identity}")
    return marked


def _open_attempt(store: RunStore, run_id: str, identity: Identity) -> AttemptRecord:
    attempts = [a for a in store.list_attempts(run_id) if a.identity == identity]
    if not attempts:
        raise InputError(f"run {run_id!r} has no attempt at {identity}; "
                         "`revise attempts --unresolved` lists the open ones")
    latest = attempts[-1]
    if latest.status not in OPEN_ATTEMPT_STATUSES:
        raise InputError(f"the latest attempt at {identity} is {latest.status}; there is "
                         "nothing to reconcile")
    if latest.status is AttemptStatus.PENDING and owner_alive(latest.owner) is not False:
        raise InputError(f"the attempt at {identity} is still pending and its owner "
                         f"{latest.owner} may be running; wait for the reconciler to mark it "
                         "unresolved (lease expiry) before deciding")
    return latest


def _fingerprint(store: RunStore, attempt: AttemptRecord) -> str:
    revision = store.get_revision(attempt.run_id, attempt.revision)
    if revision is not None:
        for site in assign_sites(ast.parse(revision.source_text)):
            if site.site == attempt.identity.site:
                return site.fingerprint
    raise InputError(f"cannot find site {attempt.identity.site} in revision "
                     f"{attempt.revision} of run {attempt.run_id}")


def result_from_log(store: RunStore, log_path: Path, run_id: str,
                    identity: Identity | str) -> Any:
    """The result of the paid call at ``identity`` from a provider log: the line of the
    run and identity whose outcome is ok and whose payload digest is the open attempt's.

    This is how an operator writes back a result whose commit was lost, instead of
    abandoning a call that was paid.
    """
    ident = identity if isinstance(identity, Identity) else Identity.parse(identity)
    attempt = _open_attempt(store, run_id, ident)
    lines = [e for e in ProviderLog(log_path).read()
             if e.get("run_id") == run_id and e.get("identity") == str(ident)]
    if not lines:
        raise InputError(f"{log_path} has no line for {ident} in run {run_id!r}: the provider "
                         "log of the broker worker that ran it (its REVISE_HOME) has it, if "
                         "the provider was called")
    ok = [e for e in lines if e.get("outcome") == "ok"]
    if not ok:
        raise InputError(f"{log_path}: every call at {ident} in run {run_id!r} ended with an "
                         "error; there is no result to write back (abandon the attempt)")
    matching = [e for e in ok if e.get("digest") == attempt.digest]
    if not matching:
        raise InputError(f"{log_path}: the ok line at {ident} has payload digest "
                         f"{str(ok[-1].get('digest'))[:12]}, the open attempt "
                         f"{attempt.digest[:12]}; it is another payload's result")
    if "result" not in matching[-1]:
        raise InputError(f"{log_path}: the line at {ident} predates logged results; take the "
                         "result from the provider and pass it with --result FILE")
    return matching[-1]["result"]


def reconcile_attempt(store: RunStore, run_id: str, identity: Identity | str, *,
                      result: Any = _UNSET, operator: str, reason: str) -> dict[str, Any]:
    """Resolve the open attempt at ``identity``: with ``result`` write it back, else abandon."""
    if not operator.strip() or not reason.strip():
        raise InputError("a reconcile decision needs --operator NAME and --reason TEXT "
                         "(both are recorded)")
    ident = identity if isinstance(identity, Identity) else Identity.parse(identity)
    attempt = _open_attempt(store, run_id, ident)
    if result is _UNSET:
        decided = store.resolve_attempt(attempt.id, AttemptStatus.ABANDONED,
                                        operator=operator, reason=reason)
        decision = "abandoned"
    else:
        price = CATALOG[attempt.capability].unit_price if attempt.capability in CATALOG else 0
        slot = SlotRecord(run_id=run_id, identity=ident, capability=attempt.capability,
                          digest=attempt.digest, fingerprint=_fingerprint(store, attempt),
                          result=result, usage={"reconciled": True}, cost=price,
                          revision=attempt.revision)
        decided = store.resolve_attempt(attempt.id, AttemptStatus.RESOLVED, operator=operator,
                                        reason=reason, slot=slot)
        certificate = build_certificate(store.list_slots(run_id))
        store.save_certificate(run_id, attempt.revision, certificate.digest,
                               list(certificate.entries))
        decision = "resolved"
    store.add_event(run_id, "attempt_reconciled",
                    f"{operator} {decision} attempt #{decided.number} at {ident}: {reason}",
                    identity=ident, revision=attempt.revision,
                    data={"operator": operator, "reason": reason, "decision": decision,
                          "attempt_id": attempt.id, "at": datetime.now(UTC).isoformat()})
    remaining = store.list_attempts(run_id, frozenset(OPEN_ATTEMPT_STATUSES))
    if not remaining:
        store.set_run_status(run_id, RunStatus.STOPPED,
                             "reconciled; run the script again on this run id to continue")
    return {"run_id": run_id, "identity": str(ident), "decision": decision,
            "attempt_id": attempt.id, "operator": operator, "reason": reason,
            "open_attempts_left": len(remaining)}

"""The operator's side of the crash window: sweeping for attempts and revisions whose
owner is gone, and the decisions that resolve them.

When an open attempt counts as unresolved is ``broker.crash_window``'s rule. An
operator resolves each one: write back the known result (the identity is
committed and replays from then on) or abandon it (the identity may execute
once more). Every decision is recorded with operator, reason and time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from broker.artifacts import ArtifactStore
from broker.catalog import CATALOG
from broker.crash_window import attempt_expired, lease_expired, mark_unresolved
from broker.errors import InputError, ReviseError, RevisionLost
from broker.identity import Identity
from broker.owner import owner_alive
from broker.providers import CallContext, Lookup
from broker.providers.log import ProviderLog
from broker.records import (
    OPEN_ATTEMPT_STATUSES,
    RECONCILABLE_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    JobStatus,
    RunStatus,
    SlotRecord,
)
from broker.store import RunStore
from orchestrator.certificate import build_certificate
from orchestrator.reconcile_input import Imported, check_write_back

log = logging.getLogger("revise.reconcile")

_UNSET = object()


def sweep(store: RunStore, lease_seconds: float, *, now: datetime | None = None
          ) -> list[AttemptRecord]:
    """Mark pending attempts unresolved when their owner is gone or their lease expired.

    Idempotent and safe with two reconcilers: the store's transition from
    pending is atomic, so each attempt is reported by exactly one of them.
    """
    now = now or datetime.now(UTC)
    marked = []
    for attempt in store.list_attempts(statuses=frozenset({AttemptStatus.PENDING})):
        if not attempt_expired(attempt, lease_seconds, now, store_since=store.available_since):
            continue
        found = mark_unresolved(store, attempt, by="reconciler",
                                reason="owner is gone or its lease expired before a commit")
        if found is not None:
            marked.append(found)
    for attempt in marked:
        store.set_run_status(attempt.run_id, RunStatus.BLOCKED,
                             f"blocked: unresolved attempt at {attempt.identity}")
    return marked


LOST_SANDBOX = "lost: sandbox worker died"
LOST_MESSAGE = "lost: job message lost"
LOST_DISPATCHER = ("lost: the dispatcher died or failed between numbering the revision and "
                   "queueing its job")
LOST_RUNNER = "lost: the process running it died"


@dataclass(frozen=True)
class LostRevision:
    run_id: str
    revision: int
    reason: str


def sweep_revisions(store: RunStore, lease_seconds: float, *, now: datetime | None = None,
                    run_id: str | None = None) -> list[LostRevision]:
    """Mark running revisions (of ``run_id``, else of every run) whose owner is gone
    ``failed`` with the reason named.

    An owner on this host that died is seen at once; elsewhere the lease expires
    ``lease_seconds`` after its last renewal. A revision whose job was accepted and
    never started belongs to the requeue sweep (``workers.recovery``). Safe with two
    reconcilers: the transition is conditional on the lease that was seen.
    """
    now = now or datetime.now(UTC)
    lost = []
    for rev in store.running_revisions(run_id):
        if not lease_expired(rev.owner, rev.heartbeat_at or rev.created_at, lease_seconds,
                             now, store_since=store.available_since):
            continue
        job = store.job_for_revision(rev.run_id, rev.revision)
        if job is not None and job.status in (JobStatus.ACCEPTED, JobStatus.PARKED):
            continue  # the requeue sweep's; a parked job holds no lease while it waits
        if job is not None:
            reason = LOST_SANDBOX
        elif rev.heartbeat_at is not None and rev.heartbeat_at > rev.created_at:
            reason = LOST_RUNNER  # it was renewed: an embedded run that died
        else:
            reason = LOST_DISPATCHER
        if lose_revision(store, rev.run_id, rev.revision, reason,
                         seen_heartbeat=rev.heartbeat_at):
            lost.append(LostRevision(rev.run_id, rev.revision, reason))
    if run_id is None:
        settle_runs(store)
    return lost


_RUN_STATUS = {"succeeded": RunStatus.SUCCEEDED, "failed": RunStatus.FAILED,
               "stopped": RunStatus.STOPPED}


def settle_runs(store: RunStore) -> list[str]:
    """Runs still marked ``running`` although their latest revision finished (the store
    went away between the revision's write and the run's) take the revision's state."""
    settled = []
    for rev in store.runs_behind():
        error = (rev.summary or {}).get("error") or {}
        status = _RUN_STATUS.get(rev.status, RunStatus.FAILED)
        detail = str(error.get("message") or "")[:500] or None
        if error.get("type") == "AttemptUnresolved":
            status = RunStatus.BLOCKED
            detail = f"blocked: unresolved attempt at {error.get('identity')}"
        store.set_run_status(rev.run_id, status, detail)
        settled.append(rev.run_id)
    return settled


def lose_revision(store: RunStore, run_id: str, revision: int, reason: str, *,
                  seen_heartbeat: datetime | None) -> bool:
    """Fail a running revision as lost (if nobody renewed its lease meanwhile), with a run
    JSON that says why and how to go on; the run is resumable."""
    message = (f"{reason}; committed calls are kept and replay when the run is submitted "
               "again on this run id")
    from orchestrator.report import CertificateReport, ErrorReport, RevisionStatus, RunReport

    certificate = build_certificate(store.list_slots(run_id))
    summary = RunReport(
        run_id=run_id, revision=revision, status=RevisionStatus.FAILED,
        error=ErrorReport.model_validate({**RevisionLost(message).to_json(),
                                          "reason": reason}),
        certificate=CertificateReport.model_validate(certificate.to_json())).to_json()
    if not store.lose_revision(run_id, revision, message, summary,
                               seen_heartbeat=seen_heartbeat):
        return False
    store.add_event(run_id, "revision_lost", message, revision=revision,
                    data={"reason": reason})
    return True


def _open_attempt(store: RunStore, run_id: str, identity: Identity,
                  attempt_id: int | None = None) -> AttemptRecord:
    """``attempt_id``'s attempt at ``identity``, else the latest open one there: a repair
    may have asked another request at this identity since (a changed payload is not held
    up by an uncertain attempt of the old one), so more than one may be open."""
    attempts = [a for a in store.list_attempts(run_id) if a.identity == identity]
    if not attempts:
        raise InputError(f"run {run_id!r} has no attempt at {identity}; "
                         "`revise attempts --unresolved` lists the open ones")
    open_ = [a for a in attempts if a.status in RECONCILABLE_ATTEMPT_STATUSES
             and attempt_id in (None, a.id)]
    if not open_:
        which = "the latest" if attempt_id is None else f"attempt id {attempt_id}"
        last = attempts[-1] if attempt_id is None else next(
            (a for a in attempts if a.id == attempt_id), None)
        raise InputError(f"no attempt at {identity} is open ({which} is "
                         f"{last.status if last else 'not there'}); there is nothing to "
                         "reconcile")
    attempt = open_[-1]
    if attempt.status is AttemptStatus.PENDING and owner_alive(attempt.owner) is not False:
        raise InputError(f"the attempt at {identity} is still pending and its owner "
                         f"{attempt.owner} may be running; wait for the reconciler to mark it "
                         "unresolved (lease expiry) before deciding")
    return attempt


def _unusable(store: RunStore, attempt: AttemptRecord) -> str | None:
    """Why a result written back for ``attempt`` could never be replayed, or None: the run
    asked another request (payload) at its identity since (committed there, or a later
    attempt), or changed the call at its site and committed the changed one (every call
    stored under one name is one call expression: written back, it would stop every later
    submit)."""
    committed = store.get_slot(attempt.run_id, attempt.identity)
    if committed is not None and committed.digest != attempt.digest:
        return f"revision {committed.revision} committed another request at its identity"
    later = [a for a in store.list_attempts(attempt.run_id)
             if a.identity == attempt.identity and a.number > attempt.number
             and a.digest != attempt.digest]
    if later:
        return f"attempt #{later[-1].number} asked another request at its identity since"
    for slot in store.list_slots(attempt.run_id):
        if attempt.fingerprint and slot.identity.site == attempt.identity.site and (
                slot.capability, slot.fingerprint) != (attempt.capability, attempt.fingerprint):
            return (f"the run no longer makes its call: revision {slot.revision} changed the "
                    f"call at {attempt.identity.site} and committed it (line {slot.line})")
    return None


def _call_facts(store: RunStore, attempt: AttemptRecord) -> tuple[str, str, int | None]:
    """The fingerprint, chain fingerprint and line a commit of ``attempt`` stores with its
    slot (``broker.spend``): the attempt's own, recorded when its call was claimed.

    Its identity names where the call is stored, which is not always a site of its
    revision: a relocated call is stored under the frozen site it stands for (whose name
    may be another call's in that revision), a new call whose name was frozen under a
    ``~chain`` suffix. No lookup of that name among the revision's sites is needed."""
    if attempt.fingerprint:
        return attempt.fingerprint, attempt.chain_fingerprint, attempt.line
    # Claimed before the store kept them (migration 0007): every call stored under one
    # name has one call expression (the gate relocates only onto an equal one), so a
    # committed slot there has it.
    for slot in store.list_slots(attempt.run_id):
        if slot.identity.site == attempt.identity.site:
            return slot.fingerprint, slot.chain_fingerprint, None
    raise InputError(f"attempt #{attempt.number} at {attempt.identity} was claimed before the "
                     "run store kept its call expression, and nothing is committed at site "
                     f"{attempt.identity.site} to take it from; its result cannot be written "
                     "back (abandon it instead)")


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
        raise InputError(f"{log_path} has no line for {ident} in run {run_id!r}. "
                         + _dispatch_record(attempt))
    ok = [e for e in lines if e.get("outcome") == "ok"]
    sent = [e for e in lines if e.get("outcome") == "sent" and e.get("digest") == attempt.digest]
    if sent and not any(e.get("digest") == attempt.digest for e in ok):
        raise InputError(_sent_only(log_path, ident, run_id, sent[-1]))
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


def ask_provider(store: RunStore, provider: Any, run_id: str, identity: Identity | str
                 ) -> Lookup:
    """What the provider did for the open attempt's idempotency key (its lookup)."""
    ident = identity if isinstance(identity, Identity) else Identity.parse(identity)
    attempt = _open_attempt(store, run_id, ident)
    found = _lookup(store, provider, attempt)
    if found.state == "unknown" and not _lookup_knows(store, provider):
        raise InputError(f"the provider's lookup has no record of key "
                         f"{attempt.idempotency_key}, nor of the last request it answered "
                         "with a result: a lookup that knows no key (a wrong "
                         "REVISE_PROVIDER_LOOKUP_PATH, a provider that keeps none, or keeps "
                         "them for less time) cannot show the request was never charged. "
                         "Check the provider's own records, then pass --abandon (never "
                         "charged) or --result FILE")
    return found


def _lookup(store: RunStore, provider: Any, attempt: AttemptRecord) -> Lookup:
    capability = CATALOG[attempt.capability]
    stored = store.get_blobs(attempt.run_id, [attempt.digest]).get(attempt.digest)
    if stored is None or not attempt.idempotency_key:
        raise InputError(f"attempt #{attempt.number} at {attempt.identity} has no stored "
                         "request to ask the provider about")
    value = json.loads(stored)
    payload = value["payload"] if set(value) == {"payload", "take"} else value
    call = CallContext(attempt.run_id, str(attempt.identity), attempt.idempotency_key)
    found: Lookup = provider.lookup(capability, payload, call)
    return found


def resolve_by_lookup(store: RunStore, provider: Any, artifacts: ArtifactStore,
                      *, by: str = "provider lookup") -> list[dict[str, Any]]:
    """The sweep's share of money: every unresolved or uncertain attempt whose request was
    sent is asked about at its provider (where it offers a lookup by key). Completed: its
    result is committed; unknown (the provider has no record, so it never charged):
    abandoned, its call may run again, but only once the lookup has shown it knows a key
    the provider did receive; still in progress, or the lookup failed: next sweep.
    Returns the decisions."""
    asked: list[tuple[AttemptRecord, Lookup]] = []
    statuses = frozenset({AttemptStatus.UNRESOLVED, AttemptStatus.UNCERTAIN})
    for attempt in store.list_attempts(statuses=statuses):
        if attempt.sent_at is None or attempt.capability not in CATALOG:
            continue
        try:
            asked.append((attempt, _lookup(store, provider, attempt)))
        except ReviseError as exc:
            log.warning("could not ask the provider about attempt #%s at %s: %s",
                        attempt.number, attempt.identity, exc.message)
    unknown_trusted = any(found.state == "completed" for _, found in asked) or (
        any(found.state == "unknown" for _, found in asked) and _lookup_knows(store, provider))
    decided = []
    for attempt, found in asked:
        decision: dict[str, Any] = {}
        unusable = _unusable(store, attempt)
        if found.state == "completed" and unusable is not None:
            decision = {"reason": "the provider's lookup by idempotency key says it did "
                        f"this request's work, but {unusable}: its result is not used; it "
                        "stays counted as paid"}
        elif found.state == "completed" and found.answer is not None:
            decision = {"result": found.answer.result, "artifacts": artifacts,
                        "reason": "the provider's lookup by idempotency key returned the "
                        "result it kept"}
        elif found.state == "unknown" and unknown_trusted:
            decision = {"reason": "the provider has no record of this idempotency key: the "
                        "request never reached it and was not charged"}
        elif found.state == "unknown":
            log.warning("the provider's lookup has no record of attempt #%s at %s (key %s), "
                        "nor of the last request it answered: a lookup that knows no key "
                        "(a wrong REVISE_PROVIDER_LOOKUP_PATH, a provider that keeps none, or "
                        "keeps them for less time) cannot show a request was never charged; "
                        "the attempt stays counted as paid until `revise reconcile` decides "
                        "it", attempt.number, attempt.identity, attempt.idempotency_key)
        if not decision:
            continue  # still in progress: the next sweep asks again
        try:
            decided.append(reconcile_attempt(store, attempt.run_id, attempt.identity,
                                             operator=by, attempt_id=attempt.id, **decision))
        except ReviseError as exc:  # decided meanwhile, or its result does not fit
            log.warning("attempt #%s at %s stays open: %s", attempt.number,
                        attempt.identity, exc.message)
    return decided


def _lookup_knows(store: RunStore, provider: Any) -> bool:
    """Does the provider's lookup know the key of the last request it answered with a
    result? A 404 means "never received" only from a lookup that does."""
    known = store.latest_succeeded_attempt()
    if known is None or known.capability not in CATALOG:
        return False
    try:
        return _lookup(store, provider, known).state == "completed"
    except ReviseError as exc:
        log.warning("could not ask the provider about the last request it answered: %s",
                    exc.message)
        return False


def _dispatch_record(attempt: AttemptRecord) -> str:
    """What the run store knows of the attempt's dispatch, from any host: where to look
    next when this host's provider log has nothing of it."""
    if attempt.sent_at is None:
        return (f"The run store says attempt #{attempt.number} never sent its request (no "
                "dispatch record): nothing can have been paid, so --abandon is safe")
    key = attempt.idempotency_key or "(none)"
    if attempt.answered_at is not None:
        answered = (f"and an answer came back at {attempt.answered_at:%Y-%m-%d %H:%M:%S} "
                    "UTC, but it was never committed")
    else:
        answered = "and no answer was recorded"
    return (f"The run store says attempt #{attempt.number} sent its request at "
            f"{attempt.sent_at:%Y-%m-%d %H:%M:%S} UTC under idempotency key {key} "
            f"{answered}: the provider may have done and charged the work. The provider "
            f"log of the broker worker that ran it ({attempt.owner}, its REVISE_HOME) may "
            "hold the answer; else ask the provider for that key (`--from-provider` where "
            "it offers a lookup) and commit its result with --result FILE, or --abandon if "
            "it never ran")


def _sent_only(log_path: Path, ident: Identity, run_id: str, line: dict[str, Any]) -> str:
    return (f"{log_path}: the request at {ident} in run {run_id!r} left at {line.get('ts')} "
            f"under idempotency key {line.get('idempotency_key')} but no answer was recorded "
            "(the dispatch ended mid-call): the provider may have done and charged the work. "
            "Check with the provider for that key, then commit its result with --result FILE, "
            "or --abandon if it never ran")


def reconcile_attempt(store: RunStore, run_id: str, identity: Identity | str, *,
                      result: Any = _UNSET, operator: str, reason: str,
                      artifacts: ArtifactStore | None = None,
                      imports: Sequence[Imported] = (),
                      attempt_id: int | None = None) -> dict[str, Any]:
    """Resolve the open attempt at ``identity`` (``attempt_id``'s, else the latest open
    one): with ``result`` write it back, else abandon.

    Operator entry points (the CLI, the admin task) pass ``artifacts``: the result is then
    checked against the capability's result shape and the artifact store, ``imports``
    stored with it (``orchestrator.reconcile_input``), before anything is committed."""
    if not operator.strip() or not reason.strip():
        raise InputError("a reconcile decision needs --operator NAME and --reason TEXT "
                         "(both are recorded)")
    ident = identity if isinstance(identity, Identity) else Identity.parse(identity)
    attempt = _open_attempt(store, run_id, ident, attempt_id)

    def event_of(decided: AttemptRecord) -> tuple[str, str, dict[str, Any]]:
        decision = decided.status.value
        return ("attempt_reconciled",
                f"{operator} {decision} attempt #{decided.number} at {ident}: {reason}",
                {"operator": operator, "reason": reason, "decision": decision,
                 "attempt_id": attempt.id, "at": datetime.now(UTC).isoformat()})

    if result is _UNSET:
        decided = store.resolve_attempt(attempt.id, AttemptStatus.ABANDONED,
                                        operator=operator, reason=reason, event_of=event_of)
    else:
        if artifacts is not None:
            check_write_back(attempt.capability, result, artifacts, imports)
        price = CATALOG[attempt.capability].unit_price if attempt.capability in CATALOG else 0
        unusable = _unusable(store, attempt)
        if unusable is not None:
            raise InputError(
                f"attempt #{attempt.number} at {ident} cannot be written back: {unusable}, "
                "so its result could never be replayed. Abandon it (--abandon): it stays "
                "counted as paid")
        fingerprint, chain, line = _call_facts(store, attempt)
        slot = SlotRecord(run_id=run_id, identity=ident, capability=attempt.capability,
                          digest=attempt.digest, fingerprint=fingerprint, result=result,
                          usage={"reconciled": True}, cost=price, revision=attempt.revision,
                          chain_fingerprint=chain, line=line)
        decided = store.resolve_attempt(attempt.id, AttemptStatus.RESOLVED, operator=operator,
                                        reason=reason, slot=slot, event_of=event_of)
        certificate = build_certificate(store.list_slots(run_id))
        store.save_certificate(run_id, attempt.revision, certificate.digest,
                               list(certificate.entries))
    remaining = store.list_attempts(run_id, frozenset(OPEN_ATTEMPT_STATUSES))
    run = store.get_run(run_id)
    if not remaining and run is not None and run.status is RunStatus.BLOCKED:
        store.set_run_status(run_id, RunStatus.STOPPED,
                             "reconciled; run the script again on this run id to continue")
    data = {"run_id": run_id, "identity": str(ident), "decision": decided.status.value,
            "attempt_id": attempt.id, "attempt_number": attempt.number,
            "operator": operator, "reason": reason,
            "open_attempts_left": len(remaining)}
    if result is _UNSET and attempt.sent_at is not None:
        data["warning"] = (
            f"the request of attempt #{attempt.number} was sent at "
            f"{attempt.sent_at.isoformat(timespec='seconds')} (Idempotency-Key "
            f"{attempt.idempotency_key}); abandoned, the call is asked for again when the "
            "run is submitted, and a provider that does not deduplicate by that key is paid "
            "again if it did the work")
    return data

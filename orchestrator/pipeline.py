"""One revision of a run: admit (pre-spend) → execute (sandbox, calls) → finish.

The first revision of a run id executes everything; a later one is a repair
candidate, replayed on the committed prefix. A candidate that fails the
checker or the gate starts nothing and spends nothing. The Celery dispatcher
runs ``admit``; a sandbox worker runs ``execute`` with the job it carries.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from broker.catalog import lookup
from broker.charging import counts_as_paid, never_sent
from broker.envelope import Envelope
from broker.errors import (
    InputError,
    OrphanStop,
    Parked,
    RevisionLost,
    RevisionNotRunning,
    RunBusy,
    StoreUnavailable,
)
from broker.identity import Identity, canonical_json, sha256_hex
from broker.prefix import Prefix
from broker.records import (
    COMMITTED_ATTEMPT_STATUSES,
    RECONCILABLE_ATTEMPT_STATUSES,
    AttemptRecord,
    AttemptStatus,
    RevisionEnd,
    RunStatus,
    SlotRecord,
)
from broker.settings import OrphanPolicy, Settings
from broker.store import RunStore
from orchestrator.admission import Admission, Refusal, admit
from orchestrator.certificate import build_certificate, verify
from orchestrator.inputs import envelope_bytes
from orchestrator.reconcile import lose_revision, sweep_revisions
from orchestrator.refusals import check_failed, gate_rejected
from orchestrator.report import (
    CallCounts,
    CertificateReport,
    ErrorReport,
    GateReport,
    IdentityReport,
    OrphanReport,
    RevisionStatus,
    RunReport,
)
from orchestrator.revision_lease import RevisionLease
from orchestrator.session import Executor, Session, SessionResult
from orchestrator.source import Source, decode_source

log = logging.getLogger("revise.pipeline")


@dataclass
class Admitted:
    """A numbered revision after the pre-spend half; ``admission`` is None when refused."""

    run_id: str
    revision: int
    source: Source
    args_text: str
    admission: Admission | None
    report: RunReport


def args_json(args: Any, envelope: Envelope) -> str:
    """The canonical JSON of the run's args, within the envelope's size limit."""
    try:
        args_text = canonical_json(args)
    except (InputError, TypeError, ValueError) as exc:
        raise InputError(f"args are not a JSON value: {exc}") from None
    if len(args_text.encode()) > envelope.sandbox.args_bytes:
        raise InputError(f"args are {len(args_text)} bytes; the envelope allows "
                         f"{envelope.sandbox.args_bytes}")
    return args_text


class Pipeline:
    def __init__(self, *, store: RunStore, runner: Any, settings: Settings,
                 executor_for: Callable[[Envelope], Executor] | None) -> None:
        """``executor_for(envelope)`` gives what spends on new calls (the broker)."""
        self.store = store
        self.runner = runner
        self.settings = settings
        self.executor_for = executor_for

    def run(self, run_id: str, script: bytes | str, args: Any, envelope: Envelope
            ) -> RunReport:
        admitted = self.admit(run_id, script, args, envelope)
        if admitted.admission is None:
            return admitted.report
        return self.execute(admitted, envelope)

    # ---- pre-spend ---------------------------------------------------------------------------

    def admit(self, run_id: str, script: bytes | str, args: Any, envelope: Envelope, *,
              job: Callable[[Admitted], tuple[str, dict[str, Any]]] | None = None
              ) -> Admitted:
        """Validate args, check, annotate, gate, number the revision.

        A refused candidate is recorded and finished here, so it never needs a sandbox.
        ``job(admitted)`` gives the sandbox job (id, message) of an accepted one; it is
        recorded with the revision's number, in the same transaction.
        """
        source = decode_source(script)
        args_text = args_json(args, envelope)
        slots = self.store.open_run(run_id)
        decided = admit(source, slots, relocation=str(self.settings.relocation))
        accepted = None if isinstance(decided, Refusal) else decided

        def accepted_job(number: int) -> tuple[str, dict[str, Any]]:
            assert job is not None
            return job(Admitted(run_id, number, source, args_text, accepted,
                                RunReport(run_id=run_id, revision=number)))

        revision = self._add_revision(
            run_id, source.text, source.digest, args=args_text.encode("utf-8"),
            envelope=envelope_bytes(envelope),
            job=accepted_job if job is not None and accepted is not None else None)
        report = RunReport(run_id=run_id, revision=revision)
        if isinstance(decided, Refusal):
            self._refused(report, decided)
            return Admitted(run_id, revision, source, args_text, None, report)
        report.gate = GateReport.model_validate(decided.gate.to_json())
        return Admitted(run_id, revision, source, args_text, decided, report)

    def _add_revision(self, run_id: str, *args: Any, **kwargs: Any) -> int:
        """``store.add_revision``. One revision of a run runs at a time: one whose runner is
        gone is failed first, so that a crashed run can be repaired at once; a live one
        makes this RunBusy. The sweep runs only when a revision is running, which the
        numbering sees anyway."""
        try:
            return self.store.add_revision(run_id, *args, **kwargs)
        except RunBusy:
            if not sweep_revisions(self.store, self.settings.revision_lease_seconds,
                                   run_id=run_id):
                raise
        return self.store.add_revision(run_id, *args, **kwargs)

    def _refused(self, report: RunReport, refusal: Refusal) -> None:
        if refusal.gate is None:
            report.violations = [v.to_json() for v in refusal.check.violations]
            report.error = ErrorReport.model_validate(
                check_failed(refusal.check.violations).to_json())
            kind = "check_rejected"
        else:
            report.gate = GateReport.model_validate(refusal.gate.to_json())
            report.error = ErrorReport.model_validate(
                gate_rejected(refusal.gate.counterexamples).to_json())
            kind = "gate_rejected"
        report.status = RevisionStatus.STOPPED
        report.certificate = self.verified_certificate(report.run_id)
        assert report.revision is not None
        self.store.add_event(report.run_id, kind, report.error.message,
                             revision=report.revision,
                             data={"gate": report.gate.model_dump(mode="json"),
                                   "violations": report.violations})
        self.store.finish_revision(report.run_id, report.revision, "stopped", report.to_json())
        # The run takes its latest revision's state (a crash between the two writes is
        # settled by the reconciler: ``settle_runs``).
        self.store.set_run_status(report.run_id, RunStatus.STOPPED, report.error.message[:500])

    # ---- the spending half -------------------------------------------------------------------

    def execute(self, admitted: Admitted, envelope: Envelope, *, delivery: int = 1,
                job_id: str | None = None, resumes: int = 0) -> RunReport:
        """Sandbox, one decision per call, certificate, finish.

        The revision starts in one transaction (its lease, the job ``job_id`` of the
        sandbox worker running it, started for the ``resumes``-th time, the prefix as it
        is now, on which the gate runs again)
        and ends in one. Each delivery of a Celery job gets its own RPC directory
        (``rev-N-dK``). ``RevisionNotRunning`` when the revision already ended (a stale
        delivery): nothing is started.
        """
        assert admitted.admission is not None, "execute() needs an accepted candidate"
        assert self.executor_for is not None, "this pipeline only admits"
        run_id, revision, report = admitted.run_id, admitted.revision, admitted.report
        relocation = str(self.settings.relocation)
        regated: Admission | None = None  # the gate run again on the prefix as it is now

        def admit(slots: list[SlotRecord]) -> bool:
            nonlocal regated
            assert admitted.admission is not None
            regated = admitted.admission.regate(slots, relocation)
            return regated.gate.accepted

        lease = RevisionLease(self.store, run_id, revision,
                              self.settings.revision_lease_seconds)
        started = self.store.start_revision(
            run_id, revision, owner=lease.owner, job_id=job_id, admit=admit,
            event=f"{self.runner.kind} sandbox starting", resumes=resumes)
        if started is None:
            raise RevisionNotRunning(f"revision {revision} of run {run_id} is no longer "
                                     "running; nothing was started", run_id=run_id)
        slots, accepted = started
        admission = regated
        assert admission is not None, "start_revision ran the gate"
        report.gate = GateReport.model_validate(admission.gate.to_json())
        if not accepted:
            self._refused(report, Refusal(check=_no_violations(), gate=admission.gate))
            self.store.set_run_status(run_id, RunStatus.STOPPED, report.error.message[:500]
                                      if report.error else None)
            return report
        try:
            self._spend(admitted, envelope, admission, slots, lease, delivery, job_id)
        except KeyboardInterrupt as exc:  # Ctrl-C on `revise run`: no one else would end it
            if job_id is None:
                self._lost_here(run_id, revision, exc)
            raise
        except Exception as exc:
            if job_id is not None or isinstance(exc, StoreUnavailable):
                raise  # a sandbox worker fails its job; a store outage lets the lease expire
            raise self._lost_here(run_id, revision, exc) from exc
        return report

    def _spend(self, admitted: Admitted, envelope: Envelope, admission: Admission,
               slots: list[SlotRecord], lease: RevisionLease, delivery: int,
               job_id: str | None) -> None:
        """The sandbox and its calls, then the revision's end or (a job's) its parking."""
        run_id, revision, report = admitted.run_id, admitted.revision, admitted.report
        executor = self.executor_for(envelope)
        session = Session(
            run_id=run_id, revision=revision, admission=admission,
            prefix=Prefix(slots, revision=revision),
            args=json.loads(admitted.args_text), envelope=envelope, settings=self.settings,
            store=self.store, runner=self.runner, executor=executor,
            rpc_dir=_rpc_dir(run_id, revision, delivery))
        try:
            with lease.renewed():
                result = session.run()
        finally:
            executor.close()
            shutil.rmtree(session.rpc_dir.parent, ignore_errors=True)
        if isinstance(result.stop, Parked) and job_id is not None and \
                self.store.park_job(job_id):
            # The revision runs on without a sandbox: its job resumes it when its calls
            # are settled (``workers.parking``); nothing is finished here.
            report.status = RevisionStatus.PARKED
            return
        self._finish(report, result, envelope, job_id)

    def _lost_here(self, run_id: str, revision: int, exc: BaseException
                   ) -> RevisionLost:
        """An embedded revision the host itself failed on (a fault no handler foresaw) is
        failed, naming the fault and where it happened, rather than left ``running`` until
        a later submit sweeps it; its committed calls replay when the run is submitted
        again."""
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
        reason = (f"the host failed while running the revision "
                  f"({type(exc).__name__}{where}: {str(exc)[:300]})")
        if isinstance(exc, KeyboardInterrupt):
            reason = "the revision was interrupted (Ctrl-C) while it ran"
        record = self.store.get_revision(run_id, revision)
        if record is not None:
            lose_revision(self.store, run_id, revision, reason,
                          seen_heartbeat=record.heartbeat_at)
        return RevisionLost(f"{reason}; committed calls are kept and replay when the run is "
                            "submitted again on this run id")

    # ---- after the sandbox -------------------------------------------------------------------

    def _finish(self, report: RunReport, result: SessionResult, envelope: Envelope,
                job_id: str | None) -> None:
        """The report from the revision's attempts and the run's slots (one read), then
        everything it says written in one transaction."""
        run_id, revision = report.run_id, report.revision
        assert revision is not None
        attempts, slots = self.store.revision_facts(run_id, revision)
        report.sandbox = result.sandbox
        report.warnings = sorted({*result.warnings, *getattr(self.runner, "warnings", ())})
        report.logs = list((result.outcome or {}).get("logs") or [])[:200]
        paid = _paid_at(attempts)
        report.identities = [
            IdentityReport(**c.identity.to_json(), capability=c.capability,
                           outcome=str(c.outcome),
                           cost=round(max(c.cost, paid.get(c.identity, 0.0)), 6),
                           replayed_from=None if c.replayed_from is None
                           else str(c.replayed_from))
            for c in sorted(result.calls, key=lambda c: c.identity)]
        report.calls = self._counts(attempts, revision, result)
        report.spend = round(sum(paid.values()), 6)
        run_status = self._status(report, result)
        events: list[tuple[str, str, dict[str, Any] | None]] = [
            ("sandbox_exit", "sandbox finished", {"calls": len(result.calls)})]
        orphans, policy = self._orphans(report, result, envelope, events)
        if report.status is RevisionStatus.FAILED and run_status is RunStatus.SUCCEEDED:
            run_status = RunStatus.FAILED
        certificate = build_certificate(slots)
        report.certificate = CertificateReport.model_validate(
            verify(certificate.digest, list(certificate.entries), slots).to_json())
        report.certificate.relocations = list(report.gate.relocations)
        detail = None
        if run_status is RunStatus.BLOCKED and report.error is not None:
            detail = f"blocked: unresolved attempt at {report.error.identity}"
        elif report.error is not None:
            detail = report.error.message[:500]
        events.append(("revision_finished", f"revision {revision} {report.status}",
                       report.calls.model_dump()))
        self.store.end_revision(RevisionEnd(
            run_id=run_id, revision=revision, status=str(report.status),
            summary=report.to_json(), run_status=run_status, detail=detail,
            certificate_digest=certificate.digest,
            certificate_entries=tuple(certificate.entries), orphans=tuple(orphans),
            orphan_policy=str(policy), events=tuple(events), job_id=job_id))

    @staticmethod
    def _counts(attempts: list[AttemptRecord], revision: int, result: SessionResult
                ) -> CallCounts:
        """From the store's attempts of this revision (every delivery; a claim withdrawn
        before its request left is none) and the session's replays of slots committed by
        earlier revisions: the provider log agrees."""
        sent = [a for a in attempts if not never_sent(a)]
        replayed = sum(1 for c in result.calls if str(c.outcome) == "replayed"
                       and (c.committed_by is None or c.committed_by < revision))
        denied = sum(1 for c in result.calls if str(c.outcome) == "denied")
        return CallCounts(
            executed=len(sent),
            succeeded=sum(1 for a in sent if a.status in COMMITTED_ATTEMPT_STATUSES),
            failed=sum(1 for a in sent if a.status is AttemptStatus.FAILED),
            uncertain=sum(1 for a in sent if a.status in RECONCILABLE_ATTEMPT_STATUSES),
            replayed=replayed, denied=denied)

    def _status(self, report: RunReport, result: SessionResult) -> RunStatus:
        stop, outcome = result.stop, result.outcome
        if stop is not None:
            report.status = RevisionStatus.STOPPED
            report.error = ErrorReport.model_validate(stop.to_json())
            if stop.code == "attempt_unresolved":
                return RunStatus.BLOCKED
            return RunStatus.STOPPED
        if outcome is not None and outcome.get("ok"):
            report.status = RevisionStatus.SUCCEEDED
            report.result = outcome.get("result")
            return RunStatus.SUCCEEDED
        report.status = RevisionStatus.FAILED
        error = dict((outcome or {}).get("error") or {})
        report.error = ErrorReport.model_validate({
            **error, "type": str(error.get("type") or "ScriptError"),
            "message": str(error.get("message") or "the script failed"),
            "identity": error.get("identity")})
        return RunStatus.FAILED

    def _orphans(self, report: RunReport, result: SessionResult, envelope: Envelope,
                 events: list[tuple[str, str, dict[str, Any] | None]]
                 ) -> tuple[list[Identity], OrphanPolicy]:
        """Frozen identities this revision did not reach, for every revision."""
        orphans = result.prefix.orphans()
        policy = OrphanPolicy(envelope.orphan_policy or self.settings.orphan_policy)
        report.orphans = [OrphanReport(**o.to_json(), identity=str(o)) for o in orphans]
        if not orphans:
            return [], policy
        events.append(("orphans", f"{len(orphans)} committed identities were not invoked",
                       {"identities": [str(o) for o in orphans]}))
        if policy is OrphanPolicy.STOP and report.status is RevisionStatus.SUCCEEDED:
            report.status = RevisionStatus.FAILED
            report.result = None
            report.error = ErrorReport.model_validate(OrphanStop(
                f"{len(orphans)} committed identities were not invoked (orphan policy stop): "
                + ", ".join(str(o) for o in orphans[:5]) + "; keep the calls that made them "
                "(they replay for free), or, if the repair drops that work on purpose, run it "
                "with orphan_policy warn (the envelope's, or REVISE_ORPHAN_POLICY)",
                identity=str(orphans[0])).to_json())
        return orphans, policy

    def verified_certificate(self, run_id: str) -> CertificateReport:
        """The latest persisted certificate recomputed from the store, with differences."""
        slots = self.store.list_slots(run_id)
        persisted = self.store.latest_certificate(run_id)
        if persisted is None:
            return CertificateReport.model_validate(build_certificate(slots).to_json())
        return CertificateReport.model_validate(
            verify(persisted.digest, persisted.entries, slots).to_json())


def _rpc_dir(run_id: str, revision: int, delivery: int) -> Path:
    """A fresh private directory for the revision's socket: short (a Unix socket path
    has at most 107 bytes, a run id up to 128), created atomically (mkdtemp), and named
    after the run for an operator who looks."""
    base = tempfile.mkdtemp(prefix=f"revise-{sha256_hex(run_id)[:8]}-r{revision}d{delivery}-")
    os.chmod(base, 0o755)  # the sandbox's uid traverses it to reach the socket
    return Path(base) / "rpc"


def _no_violations() -> Any:
    from orchestrator.checker import CheckReport

    return CheckReport.from_violations([])


def _paid_at(attempts: list[AttemptRecord]) -> dict[Identity, float]:
    """What this revision's attempts at each identity count as paid (the report's spend,
    identity by identity; it follows the provider's answers: a refusal it does not charge
    for costs nothing): a request that left and was never answered (its worker killed
    mid-call, the attempt unresolved) is paid until an operator says otherwise, even when
    the call's own report, a stop, carries no cost."""
    paid: dict[Identity, float] = {}
    for attempt in attempts:
        if not never_sent(attempt) and counts_as_paid(attempt):
            paid[attempt.identity] = paid.get(attempt.identity, 0.0) + \
                lookup(attempt.capability).unit_price
    return paid

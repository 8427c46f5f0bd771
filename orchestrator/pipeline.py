"""One run of a script on a run id: check → annotate → gate → sandbox → report.

The first run of a run id executes everything; a later run on the same id is
a repair candidate, replayed on the committed prefix. A candidate that fails
the checker or the gate starts nothing and spends nothing.
"""

from __future__ import annotations

import ast
import json
import logging
import secrets
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.dispatch import Broker, CallReport, CallRequest, Outcome
from broker.envelope import Envelope
from broker.errors import (
    InputError,
    OrphanStop,
    ReplayDivergence,
    ReviseError,
    SandboxError,
)
from broker.identity import Identity, canonical_json, payload_digest
from broker.records import RunStatus, SlotRecord
from broker.settings import OrphanPolicy
from broker.store import RunStore
from orchestrator.annotate import Annotated, annotate, verify_annotation
from orchestrator.certificate import build_certificate, verify
from orchestrator.checker import CheckReport, check
from orchestrator.gate import GateResult, check_gate, frozen_sites
from orchestrator.source import Source, decode_source
from sandbox.rpc import Frame, RpcServer
from sandbox.runner import Runner, SandboxJob

log = logging.getLogger("revise.pipeline")

RACE_CAPABILITY = "ctx.race"
_FRAME_BYTES = 1 << 20  # one RPC frame (a call's payload) at most


@dataclass
class Prepared:
    """A candidate that passed the checker and the gate, ready for a sandbox."""

    source: Source
    annotated: Annotated
    gate: GateResult
    check: CheckReport
    prefix: list[SlotRecord]


@dataclass
class _Calls:
    reports: list[CallReport] = field(default_factory=list)
    invoked: set[Identity] = field(default_factory=set)
    races: dict[Identity, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, report: CallReport) -> None:
        with self.lock:
            self.reports.append(report)

    def counts(self) -> dict[str, int]:
        outcomes = [r.outcome for r in self.reports]
        return {
            "executed": sum(1 for r in self.reports if r.attempted),
            "succeeded": outcomes.count(Outcome.EXECUTED),
            "failed": outcomes.count(Outcome.FAILED),
            "replayed": outcomes.count(Outcome.REPLAYED),
            "denied": outcomes.count(Outcome.DENIED),
        }


@dataclass
class Admitted:
    """A candidate after the pre-spend half; ``prepared`` is None when it was refused."""

    run_id: str
    revision: int
    source: Source
    args_text: str
    prepared: Prepared | None
    report: dict[str, Any]


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


def empty_report(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id, "revision": None, "status": "stopped", "result": None,
        "error": None,
        "calls": {"executed": 0, "succeeded": 0, "failed": 0, "replayed": 0, "denied": 0},
        "identities": [], "orphans": [], "gate": {"accepted": False, "counterexamples": []},
        "certificate": None, "violations": [], "warnings": [], "sandbox": None,
    }


class Pipeline:
    def __init__(self, *, store: RunStore, broker_for: Any, runner: Runner,
                 runs_dir: Path, settings: Any) -> None:
        """``broker_for(envelope) -> Broker`` builds the broker with the run's envelope."""
        self.store = store
        self.broker_for = broker_for
        self.runner = runner
        self.runs_dir = runs_dir
        self.settings = settings

    # ---- pre-spend ------------------------------------------------------------------------

    def prepare(self, run_id: str, source: Source, report: dict[str, Any]) -> Prepared | None:
        """Check, annotate and gate; on refusal fill ``report`` and return None."""
        checked = check(source.text)
        if not checked.valid:
            report["violations"] = [v.to_json() for v in checked.violations]
            report["error"] = {"type": "CheckFailed", "identity": None, "message": (
                f"the checker rejected the script ({len(checked.violations)} violation(s)); "
                "fix them and submit again")}
            return None
        annotated = annotate(source.text, ast.parse(source.text))
        verify_annotation(annotated)
        prefix = self.store.list_slots(run_id)
        gate = check_gate(frozen_sites(prefix), annotated.sites)
        report["gate"] = gate.to_json()
        if not gate.accepted:
            report["error"] = {"type": "GateRejected", "identity": None, "message": (
                "the gate stopped the candidate before any container started: "
                + "; ".join(c.describe() for c in gate.counterexamples))}
            return None
        return Prepared(source, annotated, gate, checked, prefix)

    # ---- the run -----------------------------------------------------------------------------

    def run(self, run_id: str, script: bytes | str, args: Any, envelope: Envelope
            ) -> dict[str, Any]:
        admitted = self.admit(run_id, script, args, envelope)
        if admitted.prepared is None:
            return admitted.report
        return self.execute(admitted, envelope)

    def admit(self, run_id: str, script: bytes | str, args: Any, envelope: Envelope
              ) -> Admitted:
        """The pre-spend half: validate args, check, annotate, gate, number the revision.

        A refused candidate is recorded and finished here, so it never needs a sandbox
        (the Celery dispatcher stops at this point and hands accepted ones on).
        """
        report = empty_report(run_id)
        source = decode_source(script)
        args_text = args_json(args, envelope)
        self.store.ensure_run(run_id)
        prepared = self.prepare(run_id, source, report)
        revision = self.store.add_revision(run_id, source.text, source.digest)
        report["revision"] = revision
        if prepared is None:
            # Nothing ran; the prefix is untouched, and the report says so.
            report["certificate"] = self.verified_certificate(run_id)
            kind = "check_rejected" if report["violations"] else "gate_rejected"
            self.store.add_event(run_id, kind, report["error"]["message"], revision=revision,
                                 data={"gate": report["gate"], "violations": report["violations"]})
            self.store.finish_revision(run_id, revision, "stopped", report)
        return Admitted(run_id, revision, source, args_text, prepared, report)

    def execute(self, admitted: Admitted, envelope: Envelope, *, workdir: str | None = None
                ) -> dict[str, Any]:
        """The spending half: sandbox, runtime rule per call, certificate, finish.

        ``workdir`` names the revision's working directory under ``runs_dir/run_id``
        (default ``rev-N``); a redelivered Celery job uses a fresh one per delivery.
        """
        assert admitted.prepared is not None, "execute() needs an accepted candidate"
        run_id, revision, report = admitted.run_id, admitted.revision, admitted.report
        self.store.set_run_status(run_id, RunStatus.RUNNING)
        calls = _Calls()
        broker = self.broker_for(envelope)
        outcome, stop = self._execute(run_id, revision, admitted.prepared, admitted.args_text,
                                      envelope, broker, calls, report,
                                      workdir or f"rev-{revision}")
        self._finish(run_id, revision, admitted.prepared, envelope, calls, outcome, stop, report)
        return report

    def _execute(self, run_id: str, revision: int, prepared: Prepared, args_text: str,
                 envelope: Envelope, broker: Broker, calls: _Calls, report: dict[str, Any],
                 workdir_name: str):
        limits = envelope.sandbox
        claim = getattr(self.runner, "claim", None)  # a pre-started (warm) sandbox, if any
        warm = claim(limits) if claim is not None else None
        if warm is not None:
            job_dir, rpc_dir = warm.job_dir, warm.rpc_dir
        else:
            workdir = self.runs_dir / run_id / workdir_name
            job_dir, rpc_dir = workdir / "job", workdir / "rpc"
            shutil.rmtree(workdir, ignore_errors=True)
            job_dir.mkdir(parents=True)
            rpc_dir.mkdir()
            rpc_dir.chmod(0o777)
        nonce = secrets.token_hex(16)
        (job_dir / "script.py").write_text(prepared.annotated.text, encoding="utf-8")
        (job_dir / "args.json").write_text(args_text, encoding="utf-8")
        (job_dir / "config.json").write_text(json.dumps({
            "concurrency": envelope.concurrency, "frame_bytes": _FRAME_BYTES,
            "output_bytes": limits.output_bytes, "log_lines": 200,
            "deadline_seconds": limits.timeout_seconds + 30}))
        (rpc_dir / "nonce").write_text(nonce)
        for path in (job_dir / "script.py", job_dir / "args.json", job_dir / "config.json",
                     rpc_dir / "nonce"):
            path.chmod(0o644)
        whitelist = {s.site: s.capability for s in prepared.annotated.sites}
        fingerprints = {s.site: s.fingerprint for s in prepared.annotated.sites}
        server = RpcServer(rpc_dir, nonce=nonce, whitelist=whitelist,
                           handler=lambda frame: self._handle(run_id, revision, broker, calls,
                                                              fingerprints, frame),
                           concurrency=envelope.concurrency, frame_bytes=_FRAME_BYTES,
                           output_bytes=limits.output_bytes)
        report["sandbox"] = self.runner.kind
        self.store.add_event(run_id, "sandbox_start", f"{self.runner.kind} sandbox starting",
                             revision=revision)
        sandbox = self.runner.start(SandboxJob(run_id, job_dir, rpc_dir, limits))
        try:
            served = server.serve(sandbox, timeout=limits.timeout_seconds)
            tail = sandbox.output()
        finally:
            sandbox.cleanup()
        self.store.add_event(run_id, "sandbox_exit", f"sandbox exited with {served.exit_code}",
                             revision=revision, data={"frames": served.frames})
        outcome = served.outcome
        if outcome is None and served.stop is None:
            served.stop = SandboxError(
                f"the sandbox exited with code {served.exit_code} without a result "
                f"(killed by a limit or crashed); output tail: {tail[-600:]!r}")
        return outcome, served.stop

    def _handle(self, run_id: str, revision: int, broker: Broker, calls: _Calls,
                fingerprints: dict[str, str], frame: Frame) -> dict[str, Any]:
        identity = Identity(frame.site, frame.path, frame.occurrence)
        with calls.lock:
            calls.invoked.add(identity)
        if frame.kind != "call":
            return self._race(run_id, revision, calls, fingerprints, identity, frame)
        report = broker.dispatch(CallRequest(run_id, revision, identity, frame.capability or "",
                                             frame.payload, fingerprints[frame.site]))
        calls.add(report)
        if report.stop is not None:
            raise report.stop
        if report.outcome is Outcome.FAILED:
            return {"ok": False, "error": report.error}
        return {"ok": True, "result": report.result}

    def _race(self, run_id: str, revision: int, calls: _Calls, fingerprints: dict[str, str],
              identity: Identity, frame: Frame) -> dict[str, Any]:
        """Race decisions are committed like calls, so a replay picks the same winner."""
        if frame.kind == "race_lookup":
            branches = frame.extra.get("branches")
            with calls.lock:
                calls.races[identity] = branches
            slot = self.store.get_slot(run_id, identity)
            if slot is None:
                return {"ok": True, "result": {"winner": None}}
            if slot.digest != payload_digest({"branches": branches}):
                raise ReplayDivergence(f"race at {identity} now has {branches} branches; the "
                                       "committed race had a different number",
                                       identity=str(identity))
            return {"ok": True, "result": slot.result}
        winner = frame.extra.get("winner")
        branches = calls.races.get(identity)
        if not isinstance(winner, int) or not isinstance(branches, int) or winner >= branches:
            raise ReplayDivergence(f"race at {identity} reported an invalid winner",
                                   identity=str(identity))
        self.store.commit(SlotRecord(run_id=run_id, identity=identity,
                                     capability=RACE_CAPABILITY,
                                     digest=payload_digest({"branches": branches}),
                                     fingerprint=fingerprints[identity.site],
                                     result={"winner": winner}, revision=revision), None)
        return {"ok": True, "result": {"winner": winner}}

    # ---- after the sandbox -------------------------------------------------------------------

    def _finish(self, run_id: str, revision: int, prepared: Prepared, envelope: Envelope,
                calls: _Calls, outcome: dict[str, Any] | None, stop: ReviseError | None,
                report: dict[str, Any]) -> None:
        report["calls"] = calls.counts()
        report["identities"] = [r.to_json() for r in sorted(calls.reports,
                                                             key=lambda r: r.identity)]
        report["warnings"] = sorted({w for r in calls.reports for w in r.warnings})
        report["logs"] = (outcome or {}).get("logs", [])
        run_status = RunStatus.FAILED
        if stop is not None:
            report["status"] = "stopped"
            report["error"] = stop.to_json()
            run_status = RunStatus.STOPPED
            if stop.code == "attempt_unresolved":
                run_status = RunStatus.BLOCKED
        elif outcome is not None and outcome.get("ok"):
            report["status"] = "succeeded"
            report["result"] = outcome.get("result")
            run_status = RunStatus.SUCCEEDED
        else:
            report["status"] = "failed"
            error = dict((outcome or {}).get("error") or {})
            report["error"] = {"type": error.pop("type", "ScriptError"),
                               "message": error.pop("message", "the script failed"),
                               "identity": error.pop("identity", None), **error}
        if report["status"] == "succeeded":
            self._orphans(run_id, revision, prepared, envelope, calls, report)
            if report["status"] != "succeeded":
                run_status = RunStatus.FAILED
        certificate = build_certificate(self.store.list_slots(run_id))
        self.store.save_certificate(run_id, revision, certificate.digest,
                                    list(certificate.entries))
        report["certificate"] = self.verified_certificate(run_id)
        detail = None
        if run_status is RunStatus.BLOCKED:
            detail = f"blocked: unresolved attempt at {report['error']['identity']}"
        elif report["error"]:
            detail = report["error"]["message"][:500]
        self.store.finish_revision(run_id, revision, report["status"], report)
        self.store.set_run_status(run_id, run_status, detail)
        self.store.add_event(run_id, "revision_finished", f"revision {revision} "
                             f"{report['status']}", revision=revision, data=report["calls"])

    def verified_certificate(self, run_id: str) -> dict[str, Any]:
        """The latest persisted certificate recomputed from the store, with differences."""
        slots = self.store.list_slots(run_id)
        persisted = self.store.latest_certificate(run_id)
        if persisted is None:
            return build_certificate(slots).to_json()
        return verify(persisted.digest, persisted.entries, slots).to_json()

    def _orphans(self, run_id: str, revision: int, prepared: Prepared, envelope: Envelope,
                 calls: _Calls, report: dict[str, Any]) -> None:
        frozen = {s.identity for s in prepared.prefix}
        orphans = sorted(frozen - calls.invoked)
        report["orphans"] = [o.to_json() | {"identity": str(o)} for o in orphans]
        if not orphans:
            return
        policy = envelope.orphan_policy or self.settings.orphan_policy
        self.store.save_orphans(run_id, revision, orphans, str(policy))
        self.store.add_event(run_id, "orphans", f"{len(orphans)} committed identities were "
                             "not invoked", revision=revision,
                             data={"identities": [str(o) for o in orphans]})
        if policy is OrphanPolicy.STOP:
            report["status"] = "failed"
            report["error"] = OrphanStop(
                f"{len(orphans)} committed identities were not invoked (orphan policy stop): "
                + ", ".join(str(o) for o in orphans[:5]),
                identity=str(orphans[0])).to_json()


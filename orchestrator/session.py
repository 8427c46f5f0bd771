"""The host side of one revision: a sandbox, its socket, and a decision per call.

The session starts the sandbox, hands it the job over the socket and serves
its waves. Every frame is admitted (this run's nonce, a site the host
annotated, the occurrence the host expects), every call of a wave is decided
from the committed prefix loaded once for the revision (``broker.prefix``), and
only new work leaves the host, to the executor (the broker in-process, or a
Celery capability task). The first divergence or denial latches the revision:
nothing that has not reached the provider is dispatched after it, and the
sandbox is told to stop.

Waves are decided and claimed in the order the sandbox sends them, in the thread that
serves it, so a stop the calls themselves decide (a divergence, a denial, a budget
refusal) ends exactly the waves after it, whatever the timing: the calls earlier waves
claimed run to their end and are reported, as they are when the script fails. A stop
from outside the script's calls (a timeout, a protocol error, a lost call) takes back
what no provider has been sent yet.

Whatever the sandbox sends is hostile: a malformed frame, a site the host did
not annotate, an unexpected occurrence, a second connection, or silence past
the deadline ends the revision as stopped (``SandboxProtocolError``,
``SandboxTimeout``), never with a crashed handler.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from broker.calls import CallReport, CallRequest, ClaimedWave, Outcome
from broker.catalog import lookup
from broker.envelope import Envelope
from broker.errors import (
    CapabilityDenied,
    ReplayDivergence,
    ReviseError,
    SafetyStop,
    SandboxError,
    SandboxProtocolError,
    SandboxTimeout,
    ScriptError,
    SemanticRepeatDenied,
    error_class,
)
from broker.grants import authorize
from broker.identity import MOVED_ASIDE, Identity, call_digest, payload_digest
from broker.ledger import LedgerAction, ledger_action
from broker.prefix import RACE, Call, Decision, Prefix, Verdict
from broker.records import SlotRecord
from broker.settings import LedgerPolicy, Settings
from broker.store import RunStore
from orchestrator.admission import Admission
from orchestrator.frames import ReachablePaths
from sandbox.channel import Channel
from sandbox.job import remove_rpc_dir
from sandbox.language import LIMITS, MAX_TAKE

log = logging.getLogger("revise.session")

# The host's limits on what the sandbox sends: the one table (sandbox.language.LIMITS).
FRAME_BYTES = LIMITS["frame_bytes"]
MESSAGE_BYTES = LIMITS["message_bytes"]
MAX_WAVE = LIMITS["wave_frames"]
WAVE_BYTES = LIMITS["wave_bytes"]
MAX_PATH = LIMITS["path_length"]
MAX_FANOUT = LIMITS["fanout_width"]
MAX_OPEN_RACE_BRANCHES = LIMITS["open_race_branches"]
_FINISHED = {"finished": True}  # a race branch that ended before any call (shared, read only)
_CONNECT_POLL = 0.1
# How often a session waiting on its sandbox looks at its deadline (a latch wakes it at
# once): a job waiting on a slow provider wakes this often for nothing, hundreds of jobs
# in one process.
_IDLE_LOOK = 2.0
# What a failed script may tell the host about its error, each field with the types the
# run report holds (anything else, or of another type, is dropped).
_ERROR_FIELD_CHARS = LIMITS["error_chars"]  # every field of a script's error, at most
_ERROR_FIELDS: dict[str, tuple[type, ...]] = {
    "type": (str,), "message": (str,), "line": (int,), "code": (str, int),
    "capability": (str,), "identity": (str,), "status": (str, int), "charged": (str,)}


class Executor(Protocol):
    """What claims and spends on new calls: the broker in-process, or claims here and
    Celery broker workers executing them."""

    def claim_wave(self, requests: Sequence[CallRequest]) -> ClaimedWave:
        """The wave's new calls decided in one claim transaction, whole or not at all."""
        ...

    def run_wave(self, wave: ClaimedWave) -> Iterable[CallReport]:
        """One report per claimed call as it is settled, or a single stop report."""
        ...

    def stop(self, why: str, *, withdraw: bool) -> None:
        """The revision stopped: nothing parks any more; with ``withdraw``, every claimed
        call nobody sent yet is taken back."""
        ...

    def close(self) -> None: ...


@dataclass
class Recorded:
    """What the revision did at one identity (for the report)."""

    identity: Identity
    capability: str
    outcome: Outcome
    attempted: bool = False
    cost: float = 0.0
    replayed_from: Identity | None = None
    committed_by: int | None = None


@dataclass
class SessionResult:
    outcome: dict[str, Any] | None  # the sandbox's result message
    stop: ReviseError | None
    calls: list[Recorded]
    warnings: list[str]
    prefix: Prefix
    sandbox: str
    output: str = ""


@dataclass
class _Race:
    identity: Identity
    branches: list[dict[str, Any] | None]
    path: tuple[int, ...]  # the race's own fanout path (its branches' are one longer)
    sites: list[str | None]  # each branch's first call site as its frames name it
    seq: int  # its lookup's: a branch's first call is the first at its site and path after
    site: str = ""  # the race's own structural site (as its frames name it)


@dataclass
class _State:
    expected: dict[tuple[str, tuple[int, ...]], int] = field(default_factory=dict)
    calls_at: dict[str, int] = field(default_factory=dict)  # frames admitted per site
    # Call frames by (site, path, occurrence) -> seq, and the seqs answered with a result:
    # what the host itself observed, which a race commit must agree with.
    call_seqs: dict[tuple[str, tuple[int, ...], int], int] = field(default_factory=dict)
    call_digests: dict[int, str] = field(default_factory=dict)  # seq -> the call's digest
    answered_ok: set[int] = field(default_factory=set)
    # A provider's error the host answered a call with, by the call's identity: the one a
    # script may end with (a CapabilityError), as the host knows it.
    failed_answers: dict[str | None, dict[str, Any]] = field(default_factory=dict)
    last_seq: int = 0
    races: dict[tuple[str, tuple[int, ...], int], _Race] = field(default_factory=dict)
    open_race_branches: int = 0  # of ``races``: what the host holds for them is bounded


class Session:
    def __init__(self, *, run_id: str, revision: int, admission: Admission, prefix: Prefix,
                 args: Any, envelope: Envelope, settings: Settings, store: RunStore,
                 runner: Any, executor: Executor, rpc_dir: Path) -> None:
        self.run_id = run_id
        self.revision = revision
        self.admission = admission
        self.whitelist = admission.whitelist
        self.prefix = prefix
        self.args = args
        self.envelope = envelope
        self.settings = settings
        self.store = store
        self.runner = runner
        self.executor = executor
        self.rpc_dir = rpc_dir
        self.nonce = secrets.token_hex(16)
        self.calls: list[Recorded] = []
        self.warnings: list[str] = []
        self._maybe_charged: set[Identity] = set()  # new calls answered "may have charged"
        self._lock = threading.Lock()
        self._latched = threading.Event()
        self._stop: ReviseError | None = None
        # Once the script returned a result, a stop from a call it no longer waits for (a
        # race's loser, still at the provider) cannot change that result: a warning.
        self._returned = False
        self._channel: Channel | None = None
        self._state = _State()
        self._paths = ReachablePaths(admission.storage_site, prefix)
        # What earlier sessions of this revision (before its job parked, or before a
        # redelivery) committed counts towards each site's call bound: the bound is the
        # revision's, not one session's. A frame at one of these identities (a replay of
        # this revision's own work) is not counted again.
        self._own: dict[str, set[Identity]] = {}
        storage = {admission.storage_site(site): site for site in self.whitelist}
        for identity, slot in prefix.slots.items():
            site = storage.get(identity.site)
            if (site is not None and slot.revision == revision
                    and all(index < MOVED_ASIDE for index in identity.path)):
                self._own.setdefault(site, set()).add(identity)
        self._state.calls_at.update({site: len(own) for site, own in self._own.items()})

    # ---- the latch ---------------------------------------------------------------------------

    def latch(self, stop: ReviseError, *, decided: bool = False) -> None:
        """The first stop wins; nothing new is dispatched after it. ``decided``: a stop
        the wave being served decided (the waves before it keep what they claimed),
        else one from outside, which also takes back what has not left for the provider
        yet."""
        with self._lock:
            if self._returned:
                self.warnings.append(f"after the script returned its result: {stop.message}")
                return
            first = self._stop is None
            if first:
                self._stop = stop
            self._latched.set()
        if first:
            self.executor.stop(f"the revision stopped ({stop.code})", withdraw=not decided)
            if self._channel is not None:
                self._channel.interrupt()  # the session thread stops waiting on the sandbox

    def _record(self, entry: Recorded) -> None:
        with self._lock:
            self.calls.append(entry)

    # ---- the revision ------------------------------------------------------------------------

    def run(self) -> SessionResult:
        limits = self.envelope.sandbox
        deadline = time.monotonic() + limits.timeout_seconds
        try:
            launched = self.runner.launch(self.run_id, self.rpc_dir, limits)
        except Exception as exc:  # it never started: the revision ends here, not `running`
            stop = exc if isinstance(exc, ReviseError) else SandboxError(
                f"the sandbox could not start: {exc}")
            return SessionResult(None, stop, [], [], self.prefix, self.runner.kind)
        channel = Channel(launched.listener, deadline=deadline, message_bytes=MESSAGE_BYTES)
        self._channel = channel
        outcome: dict[str, Any] | None = None
        pool = ThreadPoolExecutor(max_workers=self.envelope.concurrency,
                                  thread_name_prefix="revise-call")
        try:
            try:
                if self._connect(channel, launched.sandbox):
                    channel.send({"t": "job", "nonce": self.nonce, "script": self.admission.text,
                                  "args": self.args, "config": self._config()})
                    outcome = self._serve(channel, pool, deadline)
                    with self._lock:
                        self._returned = bool(outcome and outcome["ok"]) and self._stop is None
            except SafetyStop as stop:
                self.latch(stop)
            except ReviseError as exc:  # SandboxTimeout and friends
                self.latch(exc)
            except Exception as exc:  # a message no handler foresaw: fail closed, never hang
                log.exception("serving the sandbox of run %s failed", self.run_id)
                self.latch(SandboxProtocolError(
                    f"the host could not handle a message from the sandbox "
                    f"({type(exc).__name__}); the run stops"))
            if self._latched.is_set():
                self._tell_stop(channel)
        finally:
            # Calls already dispatched finish and commit: they may have been paid for.
            pool.shutdown(wait=True)
            output = launched.sandbox.output()
            launched.sandbox.cleanup()
            channel.close()
            remove_rpc_dir(launched.job.rpc_dir)
        stop = self._stop
        if outcome is None and stop is None and getattr(launched.sandbox, "oom_killed", False):
            # The engine's memory cgroup killed it: the script never saw a MemoryError.
            stop = SandboxError(f"the script ran out of memory (limit {limits.memory_mb} MiB):"
                                " the sandbox was killed at its memory limit")
        elif outcome is None and stop is None:
            stop = SandboxError(f"the sandbox exited without a result (killed by a limit or "
                                f"crashed); output tail: {output[-600:]!r}")
        return SessionResult(outcome, stop, self.calls, sorted(set(self.warnings)),
                             self.prefix, self.runner.kind, output)

    def _config(self) -> dict[str, Any]:
        limits = self.envelope.sandbox
        return {"frame_bytes": FRAME_BYTES, "message_bytes": MESSAGE_BYTES // 2,
                "output_bytes": limits.output_bytes, "log_lines": 200,
                "memory_mb": limits.memory_mb}

    def _connect(self, channel: Channel, sandbox: Any) -> bool:
        while not channel.accept(_CONNECT_POLL):
            code = sandbox.wait(0)
            if code is not None:
                return False  # it died before connecting; the caller reports its output
        return True

    def _tell_stop(self, channel: Channel) -> None:
        message = self._stop.message if self._stop is not None else "the run was stopped"
        try:
            channel.send({"t": "stop", "message": message})
        except ReviseError:
            pass

    def _serve(self, channel: Channel, pool: ThreadPoolExecutor, deadline: float
               ) -> dict[str, Any] | None:
        wave: list[Any] = []
        wave_bytes = 0  # of the messages the unfinished wave came in
        while not self._latched.is_set():
            try:
                message = channel.receive(_IDLE_LOOK)
            except EOFError:
                return None
            channel.refuse_extra_connections()
            if message is None:
                if time.monotonic() >= deadline:
                    raise SandboxTimeout(
                        f"the script ran longer than {self.envelope.sandbox.timeout_seconds:.0f}"
                        " s and was killed; raise the envelope's sandbox.timeout_seconds or do "
                        "less work")
                continue
            if message.get("nonce") != self.nonce:
                raise SandboxProtocolError("a message without this run's nonce")
            kind = message.get("t")
            if kind == "result":
                return self._outcome(message)
            if kind != "batch" or not isinstance(message.get("frames"), list):
                raise SandboxProtocolError(f"an unknown message {str(kind)[:40]!r}")
            wave.extend(message["frames"])
            if message["frames"]:  # what the host keeps until the wave is complete
                wave_bytes += channel.last_size
            if len(wave) > MAX_WAVE:
                raise SandboxProtocolError(f"a wave of more than {MAX_WAVE} calls")
            if wave_bytes > WAVE_BYTES:
                raise SandboxProtocolError(f"a wave of more than {WAVE_BYTES} bytes")
            if message.get("more") is True:
                continue
            frames, wave, wave_bytes = wave, [], 0
            self._wave(frames, pool)
        return None

    def _outcome(self, message: dict[str, Any]) -> dict[str, Any]:
        """The script's result, as far as it is well formed and within the output limit."""
        limit = self.envelope.sandbox.output_bytes
        logs = message.get("logs", [])
        if not (isinstance(logs, list) and len(logs) <= 1000
                and all(isinstance(line, str) for line in logs)):
            raise SandboxProtocolError("a result with malformed logs")
        size = len(json.dumps(message.get("result"), separators=(",", ":")))
        if size > limit:
            raise SandboxProtocolError(f"a result of {size} bytes; the envelope allows {limit}")
        if message.get("ok") is True:
            return {"ok": True, "result": message.get("result"),
                    "logs": [line[:2000] for line in logs[:200]]}
        error = message.get("error")
        if not isinstance(error, dict):
            raise SandboxProtocolError("a failed result without an error")
        fields = {k: v[:_ERROR_FIELD_CHARS] if isinstance(v, str) else v
                  for k, v in error.items() if k in _ERROR_FIELDS
                  and (v is None or (isinstance(v, _ERROR_FIELDS[k])
                                     and not isinstance(v, bool)))}
        fields = _vouched({**fields, "type": str(fields.get("type") or "ScriptError")[:100],
                           "message": str(fields.get("message") or "the script failed")},
                          self._state.failed_answers)
        return {"ok": False, "logs": [line[:2000] for line in logs[:200]], "error": {
            **fields, "message": fields["message"][:4000]}}

    # ---- one wave ----------------------------------------------------------------------------

    def _wave(self, raw_frames: list[Any], pool: ThreadPoolExecutor) -> None:
        calls: list[tuple[int, Call, CallRequest]] = []
        for raw in raw_frames:
            frame = self._admit(raw)
            if frame["kind"] == "call":
                admitted = self._call(frame)
                if admitted is not None:
                    self._state.call_digests[admitted[0]] = admitted[1].digest
                    calls.append(admitted)
            elif frame["kind"] == "race_lookup":
                self._race_lookup(frame)
            else:
                self._race_commit(frame)
        decisions = self.prefix.decide_wave([call for _, call, _ in calls])
        dispatch: list[tuple[int, CallRequest]] = []
        for (seq, call, request), decision in _replays_first(calls, decisions):
            new = self._apply(seq, call, request, decision)
            if new is not None:
                dispatch.append((seq, new))
        if self._latched.is_set() or not dispatch:
            return  # wave-first: a stop anywhere in the wave dispatches none of it
        # The new calls of a wave are claimed together. While a race is open its
        # branches' first calls go one by one: the first answer wins, none waits for all.
        for group in [[one] for one in dispatch] if self._state.races else [dispatch]:
            wave = self._claim(group)
            if self._latched.is_set():
                return  # the claim stopped the revision: no later group is claimed
            if wave is not None and wave.claimed:
                pool.submit(self._run_wave, group, wave)

    def _claim(self, calls: list[tuple[int, CallRequest]]) -> ClaimedWave | None:
        """Claim a wave's new calls and answer what the claim already knew (a stop it
        decided latches the revision); None when the executor could not claim them."""
        seqs = {request.identity: seq for seq, request in calls}
        try:
            wave = self.executor.claim_wave([request for _, request in calls])
        except Exception as exc:  # an executor that cannot even claim: fail closed
            log.exception("claiming the calls at %s in run %s failed", calls[0][1].identity,
                          self.run_id)
            self.latch(SandboxError(f"the calls at {calls[0][1].identity} and after could not "
                                    f"be claimed: {exc}", identity=str(calls[0][1].identity)))
            return None
        for report in wave.answered:
            self._reported(seqs[report.identity], report, decided=True)
        return wave

    def _apply(self, seq: int, call: Call, request: CallRequest, decision: Decision
               ) -> CallRequest | None:
        slot = decision.slot
        if decision.replays:
            assert slot is not None
            # A slot this revision committed (before its job parked, or before a crash
            # and a redelivery) is its own work, reported as executed, paid once.
            own = slot.revision == self.revision
            self._record(Recorded(call.identity, call.capability,
                                  Outcome.EXECUTED if own else Outcome.REPLAYED,
                                  attempted=own, cost=slot.cost if own else 0.0,
                                  replayed_from=slot.identity if slot.identity != call.identity
                                  else None, committed_by=slot.revision))
            self._answer(seq, {"ok": True, "result": slot.result})
            return None
        if decision.verdict is Verdict.DIVERGE:
            assert slot is not None
            self._record(Recorded(call.identity, call.capability, Outcome.DIVERGED))
            what = "capability" if slot.capability != call.capability else "payload"
            self.latch(ReplayDivergence(
                f"{call.identity} is committed with another {what} (line {slot.line}) and "
                "cannot change; the run stops here, before this call or any later one is "
                "sent. Keep the committed payload, or add a new call for new work",
                identity=str(call.identity),
                committed_digest=slot.digest, digest=call.digest, line=slot.line),
                decided=True)
            return None
        if decision.verdict is Verdict.USED:
            assert slot is not None
            self._record(Recorded(call.identity, call.capability, Outcome.DENIED))
            self.latch(SemanticRepeatDenied(
                f"{call.identity} is committed with this very call, but this revision "
                "already replayed that result to another call with the same expression and "
                "payload; a committed identity cannot be paid again. Keep one such call and "
                "pass its result to where the other one needs it",
                identity=str(call.identity), committed_identity=str(slot.identity),
                committed_line=slot.line), decided=True)
            return None
        if decision.verdict is Verdict.REPEAT:
            return self._repeat(call, request, decision)
        if decision.stored_at is not None:
            self.warnings.append(
                f"{call.identity}: its committed result went to a moved call of this "
                f"revision; this call is new work, stored at {decision.stored_at}")
            return replace(request, identity=decision.stored_at)
        return request

    def _repeat(self, call: Call, request: CallRequest, decision: Decision
                ) -> CallRequest | None:
        policy = self.envelope.ledger_policy or self.settings.ledger_policy
        action = ledger_action(LedgerPolicy(policy), lookup(call.capability))
        slot = decision.slot
        paid_at = slot.identity if slot is not None else decision.asked_at
        line = slot.line if slot is not None else None
        where = f"{paid_at}" + (f" (line {line})" if line else "")
        if slot is not None:
            how = f"was already paid at {where}"
        elif paid_at in self._maybe_charged:
            how = (f"was sent earlier in this revision, at {where}, and the provider "
                   "answered with an error after which it may have charged; it counts as "
                   "paid until an operator decides (`revise reconcile`)")
        else:
            how = f"is asked for earlier in this revision, at {where}"
        message = (f"semantic repeat at {call.identity}: this exact {call.capability} payload "
                   f"{how}")
        if action is LedgerAction.DENY:
            self._record(Recorded(call.identity, call.capability, Outcome.DENIED))
            self.latch(SemanticRepeatDenied(
                message + "; denied before dispatch. Reuse the result of that call (keep one "
                "call for the payload and pass its result on) or change the payload",
                identity=str(call.identity), committed_identity=str(paid_at),
                committed_line=line), decided=True)
            return None
        if action is LedgerAction.WARN:
            self.warnings.append(message)
            self._event("semantic_repeat", message, call.identity)
        return request

    def _run_wave(self, calls: list[tuple[int, CallRequest]], wave: ClaimedWave) -> None:
        claimed = {request.identity for request, _ in wave.claimed}
        waiting = {request.identity: seq for seq, request in calls if request.identity in claimed}
        try:
            for report in self.executor.run_wave(wave):
                self._reported(waiting.pop(report.identity), report)
        except Exception as exc:  # an executor that cannot even report: fail closed
            log.exception("executor failed at %s in run %s", calls[0][1].identity,
                          self.run_id)
            self.latch(SandboxError(f"the calls at {calls[0][1].identity} and after could not "
                                    f"be executed: {exc}", identity=str(calls[0][1].identity)))
            return
        if waiting and not self._latched.is_set():
            first = min(waiting, key=str)
            self.latch(SandboxError(f"the executor gave no answer for the call at {first}",
                                    identity=str(first)))

    def _reported(self, seq: int, report: CallReport, *, decided: bool = False) -> None:
        self._record(Recorded(report.identity, report.capability, report.outcome,
                              report.attempted, report.cost, committed_by=report.committed_by))
        self.warnings.extend(report.warnings)
        if report.stop is not None:
            self.latch(report.stop, decided=decided)
            return
        if report.outcome is Outcome.FAILED:
            error = report.error or {}
            if error.get("charged") == "maybe":
                self._maybe_charged.add(report.identity)
            else:
                self.prefix.answered_free(report.identity)
            self._state.failed_answers[error.get("identity")] = {
                k: v for k, v in error.items() if k in _ERROR_FIELDS}
            self._answer(seq, {"ok": False, "error": report.error})
        else:
            self._answer(seq, {"ok": True, "result": report.result})

    def _answer(self, seq: int, body: dict[str, Any]) -> None:
        if self._channel is None or self._latched.is_set():
            return
        if body.get("ok") and "result" in body:
            self._state.answered_ok.add(seq)
        try:
            self._channel.send({"t": "answer", "seq": seq, **body})
        except ReviseError as exc:
            self.latch(exc)

    # ---- frames ------------------------------------------------------------------------------

    def _admit(self, raw: Any) -> dict[str, Any]:
        """A frame the host will act on, or SandboxProtocolError."""
        if not isinstance(raw, dict):
            raise SandboxProtocolError("a frame that is not an object")
        seq, kind, site = raw.get("seq"), raw.get("kind"), raw.get("site")
        path, occurrence = raw.get("path"), raw.get("occurrence")
        if not (_is_int(seq) and seq > self._state.last_seq):
            raise SandboxProtocolError("a frame out of sequence")
        self._state.last_seq = seq
        if kind not in ("call", "race_lookup", "race_commit"):
            raise SandboxProtocolError(f"a frame of unknown kind {str(kind)[:40]!r}")
        if not isinstance(site, str) or site not in self.whitelist:
            raise SandboxProtocolError(f"site {str(site)[:200]!r} is not in the host's "
                                       "annotation", site=str(site)[:200])
        if not (isinstance(path, list) and len(path) <= MAX_PATH
                and all(_is_int(i) and 0 <= i < MOVED_ASIDE for i in path)):
            raise SandboxProtocolError("a frame with a malformed fanout path", site=site)
        if not _is_int(occurrence):
            raise SandboxProtocolError("a frame with a malformed occurrence", site=site)
        self._paths.check(self.whitelist[site], path)
        is_race = self.whitelist[site].capability == RACE
        if is_race != (kind != "call"):
            raise SandboxProtocolError(f"site {site} does not make {kind} frames", site=site)
        key = (site, tuple(path))
        if kind == "race_commit":
            if (site, tuple(path), occurrence) not in self._state.races:
                raise SandboxProtocolError(f"race at {site} committed without a lookup",
                                           site=site)
        else:
            expected = self._state.expected.get(key, 0)
            if occurrence != expected:
                raise SandboxProtocolError(f"occurrence {occurrence} at {site} path {path}; "
                                           f"the host expects {expected}", site=site)
            per_path = self.whitelist[site].branch_calls
            if per_path is not None and occurrence >= per_path:
                raise SandboxProtocolError(
                    f"call {occurrence + 1} at {site} path {path}: the admitted script can "
                    f"make at most {per_path} there at one fanout path (the loops inside "
                    "one branch); the sandbox named identities the script cannot reach",
                    site=site)
            self._state.expected[key] = expected + 1
            own = self._own.get(site)
            if own is not None and self._identity(site, path, occurrence) in own:
                own.discard(self._identity(site, path, occurrence))  # counted already
                if kind == "call":
                    self._state.call_seqs[(site, tuple(path), occurrence)] = seq
                return raw
            made = self._state.calls_at.get(site, 0) + 1
            bound = self.whitelist[site].max_calls
            if bound is not None and made > bound:
                raise SandboxProtocolError(
                    f"call {made} at {site}: the admitted script can make at most {bound} "
                    "there (its loop and fanout bounds); the sandbox named identities the "
                    "script cannot reach", site=site)
            self._state.calls_at[site] = made
            if kind == "call":
                self._state.call_seqs[(site, tuple(path), occurrence)] = seq
        return raw

    def _identity(self, site: str, path: list[int], occurrence: int) -> Identity:
        return Identity(self.admission.storage_site(site), tuple(path), occurrence)

    def _call(self, frame: dict[str, Any]) -> tuple[int, Call, CallRequest] | None:
        site = self.whitelist[frame["site"]]
        identity = self._identity(frame["site"], frame["path"], frame["occurrence"])
        take = frame.get("take", 1)
        if frame.get("capability") != site.capability:
            raise SandboxProtocolError(f"site {site.site} is annotated for {site.capability}, "
                                       "the frame asks for another capability", site=site.site)
        if not (_is_int(take) and 1 <= take <= MAX_TAKE):
            raise SandboxProtocolError("a call with a malformed take", site=site.site)
        if site.take is not None and take != site.take:  # the admitted script's word
            raise SandboxProtocolError(f"a call at {site.site} declares take {take}; the "
                                       f"admitted script declares {site.take}", site=site.site)
        try:
            _, payload = authorize(self.envelope, site.capability, frame.get("payload"),
                                   identity=str(identity))
        except CapabilityDenied as denied:
            self._record(Recorded(identity, site.capability, Outcome.DENIED))
            self.latch(denied, decided=True)
            return None
        digest = call_digest(payload, take)
        call = Call(identity, site.capability, digest, site.fingerprint)
        request = CallRequest(self.run_id, self.revision, identity, site.capability, payload,
                              digest, site.fingerprint, take, site.chain_fingerprint, site.line)
        return frame["seq"], call, request

    # ---- races -------------------------------------------------------------------------------

    def _branch(self, raw: Any) -> dict[str, Any] | None:
        """A race branch's first call as (storage site, digest), or {"finished": True}."""
        if raw == _FINISHED:
            return _FINISHED
        if not (isinstance(raw, dict) and isinstance(raw.get("site"), str)
                and raw["site"] in self.whitelist):
            return None
        site = self.whitelist[raw["site"]]
        try:
            _, payload = authorize(self.envelope, site.capability, raw.get("payload"),
                                   identity=site.site)
        except CapabilityDenied:
            return None
        take = raw.get("take", 1)
        if not (_is_int(take) and 1 <= take <= MAX_TAKE
                and (site.take is None or take == site.take)):
            return None
        return {"site": self.admission.storage_site(site.site),
                "fingerprint": site.fingerprint, "digest": call_digest(payload, take)}

    def _race_lookup(self, frame: dict[str, Any]) -> None:
        branches = frame.get("branches")
        if not isinstance(branches, list) or not 0 < len(branches) <= MAX_FANOUT:
            raise SandboxProtocolError("a race lookup with malformed branches")
        if self._state.open_race_branches + len(branches) > MAX_OPEN_RACE_BRANCHES:
            raise SandboxProtocolError(
                f"race lookups holding over {MAX_OPEN_RACE_BRANCHES} branches open at once "
                "(open_race_branches); the runtime never sends them", site=frame["site"])
        identity = self._identity(frame["site"], frame["path"], frame["occurrence"])
        described = [self._branch(b) for b in branches]
        key = (frame["site"], tuple(frame["path"]), frame["occurrence"])
        # The host's own site names, never the sandbox's strings: a branch naming a site
        # the host did not annotate is described as None and can never be observed.
        sites = [self.whitelist[b["site"]].site if d is not None and d is not _FINISHED
                 else None for b, d in zip(branches, described, strict=True)]
        race = _Race(identity, described, tuple(frame["path"]), sites, frame["seq"],
                     frame["site"])
        self._state.races[key] = race
        self._state.open_race_branches += len(described)
        slot = self.prefix.race(
            identity, lambda committed: _find_winner(committed.result, described)[0]
            is not None)
        if slot is None:
            self._answer(frame["seq"], {"ok": True, "winner": None})
            return
        self._close_race(key)  # replayed: the sandbox commits nothing more for it
        self.prefix.reached_race_branches(  # where the committed race stood
            slot.identity, {b["site"] for b in described if b and b.get("site")})
        winner, index = _find_winner(slot.result, described)
        if winner is None:
            self.latch(ReplayDivergence(
                f"the race at {identity} has a committed winner that none of its branches "
                "makes any more (its first call changed or is gone); the run stops before "
                "any new effect. Keep the winning branch's first call, with its payload, "
                "among the race's branches", identity=str(identity)), decided=True)
            return
        if slot.revision != self.revision:  # this revision's own decision (before its job
            # parked) is reported as when it was made: not at all
            self._record(Recorded(identity, RACE, Outcome.REPLAYED, committed_by=slot.revision))
        self._answer(frame["seq"], {"ok": True, "winner": winner, "index": index})

    def _close_race(self, key: tuple[str, tuple[int, ...], int]) -> _Race:
        race = self._state.races.pop(key)
        self._state.open_race_branches -= len(race.branches)
        return race

    def _race_commit(self, frame: dict[str, Any]) -> None:
        race = self._close_race((frame["site"], tuple(frame["path"]), frame["occurrence"]))
        winner = frame.get("winner")
        if not (_is_int(winner) and 0 <= winner < len(race.branches)):
            raise SandboxProtocolError("a race commit with an invalid winner")
        branch = race.branches[winner] or {}
        if not self._observed_win(race, winner):
            self._answer(frame["seq"], {"ok": True})  # decided in the sandbox only: the
            return  # next revision runs the race again, its committed calls replay
        result = {"winner": branch, "index": winner}
        site = self.whitelist[frame["site"]]
        self.store.commit(SlotRecord(
            run_id=self.run_id, identity=race.identity, capability=RACE,
            digest=payload_digest(branch), fingerprint=site.fingerprint, result=result,
            revision=self.revision, chain_fingerprint=site.chain_fingerprint,
            line=site.line), None)
        self._answer(frame["seq"], {"ok": True})

    def _observed_win(self, race: _Race, winner: int) -> bool:
        """Is the winner one the host saw? Its first call must have been sent to the host
        and answered with a result; a branch that finished without a call (or after its
        first call failed) leaves nothing the host observed, so nothing is frozen."""
        branch, site = race.branches[winner], race.sites[winner]
        if not branch or branch.get("finished") or site is None:
            return False
        path = (*race.path, winner)
        shapes = self.whitelist[site].paths
        if shapes is not None and not any(
                len(shape) == len(path) and shape[-1].race == race.site for shape in shapes):
            raise SandboxProtocolError(f"a race at {race.identity} committed branch {winner}, "
                                       f"described as a call at {site}, which is no branch "
                                       "of that race", identity=str(race.identity))
        seq = min((seq for (at, on, _), seq in self._state.call_seqs.items()
                   if at == site and on == path and seq > race.seq), default=None)
        if seq is None:
            raise SandboxProtocolError(f"a race at {race.identity} committed branch {winner}, "
                                       "whose first call the host never received",
                                       identity=str(race.identity))
        if seq not in self._state.answered_ok:
            return False
        if self._state.call_digests.get(seq) != branch.get("digest"):
            raise SandboxProtocolError(f"a race at {race.identity} committed branch {winner}, "
                                       "described with another payload than the first call "
                                       "the host received there", identity=str(race.identity))
        return True

    def _event(self, kind: str, message: str, identity: Identity | None = None) -> None:
        try:
            self.store.add_event(self.run_id, kind, message, revision=self.revision,
                                 identity=identity)
        except ReviseError:
            log.warning("could not record event %s for run %s", kind, self.run_id)


def _replays_first(calls: list[tuple[int, Call, CallRequest]], decisions: list[Decision]
                   ) -> list[tuple[tuple[int, Call, CallRequest], Decision]]:
    """A wave's calls in the order they are answered: the ones with a committed result
    first, in the order those were committed, then the rest in the wave's own order (so
    the first stop in it is the one reported). A race whose branches' calls were all
    answered while its job was parked is then won by the first answer, as it was live."""
    decided = list(zip(calls, decisions, strict=True))
    replays = [d for d in decided if d[1].replays]
    if len(replays) < 2:
        return decided

    def committed(item: tuple[Any, Decision]) -> float:
        slot = item[1].slot
        at = slot.committed_at if slot is not None else None
        return at.timestamp() if at is not None else float("inf")

    return sorted(replays, key=committed) + [d for d in decided if not d[1].replays]


def _vouched(error: dict[str, Any], answered: Mapping[Any, dict[str, Any]]) -> dict[str, Any]:
    """The error a script ended with, as far as the host can vouch for it. A provider's
    CapabilityError is the one the host answered that call with (``answered``, by the
    call's identity), its fields from the host's own record; Revise's other error types are
    the host's alone to raise, so a script reporting one (a forged safety stop, which
    decides how a run is settled and repaired) ended with a ScriptError that says so."""
    kind = error["type"]
    if kind == "CapabilityError":
        known = answered.get(error.get("identity"))
        if known is not None:
            return {**error, **known}
    elif kind == "ScriptError" or error_class(kind) is None:
        return {**error, "code": ScriptError.code}  # the script's own exception
    return {"type": "ScriptError", "code": ScriptError.code, "line": error.get("line"),
            "message": f"the script raised an error named {kind}: {error['message']}"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _find_winner(committed: Any, branches: list[dict[str, Any] | None]
                 ) -> tuple[int | None, int]:
    """The branch that makes the committed winner's first call (site, else call
    expression, with the same digest)."""
    if not isinstance(committed, dict):
        return None, 0
    want = committed.get("winner") or {}
    index = committed.get("index") if _is_int(committed.get("index")) else 0
    if want.get("finished"):
        if index < len(branches) and branches[index] == {"finished": True}:
            return index, index
        return None, index
    for key in ("site", "fingerprint"):
        for i, branch in enumerate(branches):
            if (branch and not branch.get("finished") and branch.get(key) == want.get(key)
                    and branch.get("digest") == want.get("digest")):
                return i, index
    return None, index

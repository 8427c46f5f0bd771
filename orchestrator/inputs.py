"""What went into a run: its args and envelope, and the payloads that reached the broker.

Every revision stores the args and the envelope it received, as canonical JSON
bytes by their sha256 (``RunStore.add_revision``). A later revision of the same
run (``revise run`` or ``revise submit`` on an existing run id, ``revise
repair``) reuses the latest stored inputs unless new ones are given, and says
so; new ones that differ from the stored ones are announced too, never
silently swapped.

``PayloadRecorder`` wraps the executor of a revision: the normalized payload of
every call that leaves the host for the broker is stored under its call digest
before dispatch, so the repair prompt can show the data that reached each
committed (or failed) call.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from broker.calls import CallReport, CallRequest
from broker.envelope import Envelope
from broker.errors import InputError, StoreError, StoreUnavailable
from broker.identity import canonical_json, sha256_hex
from broker.records import RevisionRecord
from broker.store import RunStore


class _Missing:
    """Not given on the command line (distinct from a given JSON ``null``)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()


def args_bytes(args: Any) -> bytes:
    return canonical_json(args).encode("utf-8")


def envelope_bytes(envelope: Envelope) -> bytes:
    return canonical_json(envelope.model_dump(mode="json")).encode("utf-8")


def payload_bytes(payload: Any, take: int = 1) -> bytes:
    """The bytes whose sha256 is the call digest (``broker.identity.call_digest``)."""
    value = payload if take == 1 else {"payload": payload, "take": take}
    return canonical_json(value).encode("utf-8")


def short(digest: str | None) -> str:
    return f"sha256:{digest[:12]}" if digest else "(none)"


# ---- choosing a revision's inputs ---------------------------------------------------------


@dataclass(frozen=True)
class InputChoice:
    """Where one input of a new revision comes from, and how it relates to the stored one."""

    what: str  # "args" | "envelope"
    source: str  # "given" | "stored" | "default"
    digest: str
    stored_digest: str | None = None
    stored_revision: int | None = None
    run_exists: bool = False

    @property
    def differs(self) -> bool:
        return self.stored_digest is not None and self.stored_digest != self.digest

    def note(self, run_id: str) -> str | None:
        """One line for the operator, or None when there is nothing to say."""
        flag = f"--{self.what}"
        plural = self.what == "args"
        them, differ = ("them", "differ") if plural else ("it", "differs")
        if self.source == "stored":
            return (f"reusing the {self.what} stored with revision {self.stored_revision} of "
                    f"run {run_id} ({short(self.digest)}); pass {flag} to change {them}")
        if self.differs:
            return (f"the {self.what} {differ} from the one{'s' if plural else ''} stored with "
                    f"revision {self.stored_revision} of run {run_id} "
                    f"({short(self.stored_digest)} -> {short(self.digest)}); this revision "
                    f"uses the new {self.what}")
        if self.source == "default" and self.run_exists:
            return (f"run {run_id} has no stored {self.what} (its revisions predate stored "
                    f"inputs); using the default {self.what}; pass {flag} to set {them}")
        return None

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "digest": self.digest, "differs": self.differs,
                "stored_digest": self.stored_digest, "stored_revision": self.stored_revision}


@dataclass(frozen=True)
class RunInputs:
    run_id: str
    args: Any
    envelope: Envelope
    args_choice: InputChoice
    envelope_choice: InputChoice

    def notes(self) -> list[str]:
        lines = (self.args_choice.note(self.run_id), self.envelope_choice.note(self.run_id))
        return [line for line in lines if line]

    def to_json(self) -> dict[str, Any]:
        return {"args": self.args_choice.to_json(), "envelope": self.envelope_choice.to_json(),
                "notes": self.notes()}


def latest_with_inputs(store: RunStore, run_id: str) -> tuple[bool, RevisionRecord | None]:
    """(the run has revisions, its latest revision that stored its inputs)."""
    revisions = store.list_revisions(run_id)
    stored = [r for r in revisions if r.args_digest is not None]
    return bool(revisions), (stored[-1] if stored else None)


def resolve_inputs(store: RunStore, run_id: str, *, args: Any = MISSING,
                   envelope: Envelope | None = None) -> RunInputs:
    """The args and envelope for the next revision of ``run_id``: the given ones, else the
    latest stored ones, else the defaults (``{}`` and ``Envelope()``)."""
    exists, latest = latest_with_inputs(store, run_id)
    wanted = [d for d in (latest.args_digest, latest.envelope_digest) if d] if latest else []
    blobs = store.get_blobs(run_id, wanted) if wanted else {}
    revision = latest.revision if latest else None

    def stored(digest: str | None, what: str) -> bytes | None:
        if digest is None:
            return None
        if digest not in blobs:
            raise StoreError(f"the {what} of revision {revision} of run {run_id} "
                             f"({short(digest)}) are missing from the store; pass --{what}",
                             run_id=run_id)
        return blobs[digest]

    stored_args = stored(latest.args_digest if latest else None, "args")
    stored_env = stored(latest.envelope_digest if latest else None, "envelope")
    if not isinstance(args, _Missing):
        value, source = args, "given"
    elif stored_args is not None:
        value, source = json.loads(stored_args), "stored"
    else:
        value, source = {}, "default"
    args_choice = InputChoice("args", source, sha256_hex(args_bytes(value)),
                              stored_digest=latest.args_digest if latest else None,
                              stored_revision=revision, run_exists=exists)
    if envelope is not None:
        env, source = envelope, "given"
    elif stored_env is not None:
        env, source = _envelope(stored_env, run_id, revision), "stored"
    else:
        env, source = Envelope(), "default"
    envelope_choice = InputChoice(
        "envelope", source, sha256_hex(envelope_bytes(env)),
        stored_digest=latest.envelope_digest if latest else None, stored_revision=revision,
        run_exists=exists)
    return RunInputs(run_id, value, env, args_choice, envelope_choice)


def _envelope(data: bytes, run_id: str, revision: int | None) -> Envelope:
    try:
        return Envelope.model_validate(json.loads(data))
    except (ValueError, ValidationError) as exc:
        first = str(exc).splitlines()[0][:200]
        raise InputError(f"the envelope stored with revision {revision} of run {run_id} is "
                         f"no longer valid ({first}); pass --envelope", run_id=run_id) from None


def load_blob(store: RunStore, run_id: str, digest: str | None) -> Any:
    """The JSON value stored under ``digest`` for the run, or None when there is none."""
    if not digest:
        return None
    data = store.get_blobs(run_id, [digest]).get(digest)
    return None if data is None else json.loads(data)


# ---- payloads that reach the broker ----------------------------------------------------------


class PayloadRecorder:
    """An executor that stores each call's payload by its digest, then delegates.

    Written before dispatch, like the attempt record: a store that cannot take the
    write fails the call closed (the session reports it) before anything is spent.
    """

    def __init__(self, store: RunStore, executor: Any, *, wait_seconds: float = 0.0) -> None:
        """``wait_seconds``: how long a store that does not answer is waited for (nothing
        is spent yet, so a short outage need not stop the run)."""
        self.store = store
        self.executor = executor
        self.wait_seconds = wait_seconds

    def execute(self, request: CallRequest) -> CallReport:
        data = payload_bytes(request.payload, request.take)
        deadline = time.monotonic() + self.wait_seconds
        delay = 0.25
        while True:
            try:
                self.store.put_blob(request.run_id, "payload", data)
                break
            except StoreUnavailable:
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 4.0)
        report: CallReport = self.executor.execute(request)
        return report

"""What went into a run: its args and envelope, and the payloads that reached the broker.

Every revision stores the args and the envelope it received, as canonical JSON
bytes by their sha256 (``RunStore.add_revision``). A later revision of the same
run (``revise run`` or ``revise submit`` on an existing run id, ``revise
repair``) reuses the latest stored inputs unless new ones are given, and says
so; new ones that differ from the stored ones are announced too, never
silently swapped.

Args named on the command line (``ArgsFile``) are read only once the envelope that
bounds them is known: the file's size is checked against ``sandbox.args_bytes`` before
a byte is parsed, and they must be a JSON object (what ``orchestrate(ctx, args)``
receives), nested at most ``MAX_ARGS_DEPTH`` levels.

The normalized payload of every call that reaches the broker is stored under its
call digest in the broker's claim transaction (``RunStore.begin_call``), so the
repair prompt can show the data that reached each committed (or failed) call.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from broker.envelope import Envelope
from broker.errors import InputError, StoreError
from broker.identity import call_bytes, canonical_json, sha256_hex
from broker.records import RevisionRecord
from broker.store import RunStore


class _Missing:
    """Not given on the command line (distinct from a given JSON ``null``)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
MAX_ARGS_DEPTH: Final = 100  # nested objects and arrays; deeper is a file, not args
_EXAMPLE = 'args must be a JSON object like {"shots": ["a", "b"]}'


@dataclass(frozen=True)
class ArgsFile:
    """An args file given on the command line, read by ``resolve_inputs`` once the
    revision's envelope (and so its size limit) is known."""

    path: Path

    def load(self, limit: int) -> dict[str, Any]:
        """The args in the file: size checked before parsing, then JSON, object, depth."""
        value = parse_json_file(self._read(limit), f"args file {self.path}", self.path,
                                _EXAMPLE)
        if not isinstance(value, dict):
            raise self._error(f"holds a JSON {_json_kind(value)}; {_EXAMPLE} (the script "
                              "receives it as orchestrate(ctx, args))")
        if _depth_over(value, MAX_ARGS_DEPTH):
            raise self._error(f"nests deeper than {MAX_ARGS_DEPTH} levels; {_EXAMPLE} with "
                              "less nesting")
        return value

    def _read(self, limit: int) -> bytes:
        try:
            info = self.path.stat()
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                raise self._too_big(info.st_size, limit)
            with self.path.open("rb") as handle:  # a pipe has no size: read one byte more
                data = handle.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read args file {self.path}: {exc.strerror}; pass an "
                             "existing JSON file to --args", file=str(self.path)) from None
        if len(data) > limit:
            raise self._too_big(None, limit)
        return data

    def _too_big(self, size: int | None, limit: int) -> InputError:
        size_text = f"is {size} bytes" if size is not None else f"is more than {limit} bytes"
        example = json.dumps({"sandbox": {"args_bytes": max(2 * limit, size or 0)}})
        return InputError(
            f"args file {self.path} {size_text}, over the envelope's limit of {limit} bytes "
            "(sandbox.args_bytes; the file's size counts, whitespace included); raise "
            f"sandbox.args_bytes in the envelope given to --envelope, e.g. {example}, or "
            "make the args smaller", file=str(self.path), limit=limit,
            field="sandbox.args_bytes")

    def _error(self, problem: str) -> InputError:
        return InputError(f"args file {self.path} {problem}", file=str(self.path))


def parse_json_file(data: bytes, label: str, path: Path, example: str) -> Any:
    """The JSON value in a file's ``data``, in a form the store can hash; else one
    InputError naming the file (``label``: "args file P") and the fix (``example``)."""
    def error(problem: str) -> InputError:
        return InputError(f"{label} {problem}", file=str(path))

    try:
        value = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise error(f"is not UTF-8 (byte {exc.start}); save it as UTF-8") from None
    except RecursionError:
        raise error(f"nests too deeply to read; {example}, with less nesting") from None
    except ValueError as exc:
        raise error(f"is not JSON ({exc}); {example}") from None
    try:
        canonical_json(value)  # the form it is stored and hashed in
    except InputError as exc:
        raise error(f"cannot be stored: {exc.message}") from None
    return value


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    return "null" if value is None else "number"


def _depth_over(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays deeper than ``limit`` (no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item \
            if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def args_bytes(args: Any) -> bytes:
    return canonical_json(args).encode("utf-8")


def envelope_bytes(envelope: Envelope) -> bytes:
    return canonical_json(envelope.model_dump(mode="json")).encode("utf-8")


def payload_bytes(payload: Any, take: int = 1) -> bytes:
    """The bytes whose sha256 is the call digest (``broker.identity.call_digest``)."""
    return call_bytes(payload, take)


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
    latest stored ones, else the defaults (``{}`` and ``Envelope()``). Args given as an
    ``ArgsFile`` are read within the chosen envelope's ``sandbox.args_bytes``."""
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
    # The envelope first: it bounds the size of an args file, checked before parsing.
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
    if isinstance(args, ArgsFile):
        value, source = args.load(env.sandbox.args_bytes), "given"
    elif not isinstance(args, _Missing):
        value, source = args, "given"
    elif stored_args is not None:
        value, source = json.loads(stored_args), "stored"
    else:
        value, source = {}, "default"
    args_choice = InputChoice("args", source, sha256_hex(args_bytes(value)),
                              stored_digest=latest.args_digest if latest else None,
                              stored_revision=revision, run_exists=exists)
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

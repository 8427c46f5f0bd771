"""Replay model outputs from a JSONL file (offline use, the demo, tests, the bench).

One JSON object per line::

    {"purpose": "repair", "output": "```python\\n...\\n```"}
    {"purpose": "author", "key": "storyboard", "output": "..."}

Entries are served in file order, each once. An entry answers a request when
its ``purpose`` matches (an entry without one answers any purpose) and, if it
has a ``key``, when that string occurs in the request's messages. Blank lines
and lines starting with ``#`` are skipped.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.errors import InputError
from orchestrator.models.base import PURPOSES, Message


@dataclass(frozen=True)
class RecordedOutput:
    output: str
    purpose: str | None = None
    key: str | None = None
    line: int = 0

    def answers(self, purpose: str, prompt: str) -> bool:
        if self.purpose is not None and self.purpose != purpose:
            return False
        return self.key is None or self.key in prompt


@dataclass(frozen=True)
class RecordedCall:
    purpose: str
    messages: list[Message]
    line: int  # the JSONL line that answered


class RecordingExhausted(InputError):
    """A recorded model file has no answer left for what the loop asks (its ``file``)."""

    code = "recording_exhausted"
    purpose: str  # what the missing answer was for: repair | author


@dataclass
class RecordedBackend:
    outputs: list[RecordedOutput]
    source: str = "<memory>"
    calls: list[RecordedCall] = field(default_factory=list)
    _used: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def name(self) -> str:
        return f"recorded:{self.source}"

    @classmethod
    def load(cls, path: Path) -> RecordedBackend:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot read recorded model outputs {path}: {exc.strerror}; "
                             "pass --model recorded:PATH to an existing JSONL file") from None
        return cls(parse_jsonl(text, str(path)), source=str(path))

    @classmethod
    def of(cls, *outputs: str, purpose: str | None = None) -> RecordedBackend:
        """Convenience for tests: answer with ``outputs`` in order."""
        return cls([RecordedOutput(o, purpose, None, i + 1) for i, o in enumerate(outputs)])

    def remaining(self, purpose: str | None = None) -> int:
        return sum(1 for i, o in enumerate(self.outputs) if i not in self._used
                   and (purpose is None or o.purpose in (None, purpose)))

    def complete(self, messages: list[Message], *, purpose: str) -> str:
        prompt = "\n".join(str(m.get("content", "")) for m in messages)
        with self._lock:
            for index, entry in enumerate(self.outputs):
                if index not in self._used and entry.answers(purpose, prompt):
                    self._used.add(index)
                    self.calls.append(RecordedCall(purpose, list(messages), entry.line))
                    return entry.output
        served = sum(1 for c in self.calls if c.purpose == purpose)
        raise RecordingExhausted(
            f"the recorded model outputs in {self.source} have no unused {purpose!r} entry "
            f"left (served {served}); add a line {{\"purpose\": \"{purpose}\", \"output\": "
            "...} or lower --max-attempts", file=self.source, purpose=purpose)


def parse_jsonl(text: str, source: str = "<memory>") -> list[RecordedOutput]:
    outputs: list[RecordedOutput] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            data: Any = json.loads(line)
        except ValueError as exc:
            raise InputError(f"{source} line {number} is not JSON ({exc}); write one object "
                             "per line: {\"purpose\": \"repair\", \"output\": \"...\"}") from None
        outputs.append(_entry(data, source, number))
    return outputs


def _entry(data: Any, source: str, number: int) -> RecordedOutput:
    where = f"{source} line {number}"
    if not isinstance(data, dict) or not isinstance(data.get("output"), str):
        raise InputError(f"{where} needs an object with a string \"output\"")
    unknown = sorted(set(data) - {"purpose", "key", "output", "note"})
    if unknown:
        raise InputError(f"{where} has unknown field(s) {', '.join(unknown)}; allowed: "
                         "purpose, key, output, note")
    purpose = data.get("purpose")
    if purpose is not None and purpose not in PURPOSES:
        raise InputError(f"{where}: purpose {purpose!r} is not one of "
                         f"{', '.join(sorted(PURPOSES))}")
    key = data.get("key")
    if key is not None and not isinstance(key, str):
        raise InputError(f"{where}: key must be a string")
    return RecordedOutput(data["output"], purpose, key, number)

"""Decode a script exactly once; what the checker parses is what the sandbox runs."""

from __future__ import annotations

import re
from dataclasses import dataclass

from broker.errors import InputError
from broker.identity import sha256_hex, utf8_bytes

MAX_SOURCE_BYTES = 256 * 1024

# PEP 263: a coding declaration in the first two lines.
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_UTF8_NAMES = {"utf-8", "utf8", "utf_8", "u8", "utf"}


@dataclass(frozen=True)
class Source:
    text: str
    digest: str

    @property
    def size(self) -> int:
        return len(self.text.encode("utf-8"))


def decode_source(data: bytes | str) -> Source:
    """Return the one decoded text of a script, or raise InputError naming the fix."""
    raw = utf8_bytes("script", data) if isinstance(data, str) else bytes(data)
    if len(raw) > MAX_SOURCE_BYTES:
        raise InputError(
            f"script is {len(raw)} bytes; the limit is {MAX_SOURCE_BYTES}; "
            "move data into --args instead of literals")
    if b"\x00" in raw:
        raise InputError("script contains a NUL byte; save it as plain UTF-8 text")
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    for line in raw.split(b"\n")[:2]:
        match = _CODING.match(line)
        if match and match.group(1).decode("ascii", "replace").lower() not in _UTF8_NAMES:
            raise InputError(
                f"script declares coding {match.group(1).decode('ascii', 'replace')!r}; "
                "only UTF-8 is accepted: remove the coding line and save as UTF-8")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"script is not valid UTF-8 (byte {exc.start}); save it as UTF-8") from None
    if "\r" in text.replace("\r\n", ""):
        raise InputError(
            "script contains a carriage return that is not part of CRLF; "
            "use \\n (or \\r\\n) line breaks only")
    text = text.replace("\r\n", "\n")
    return Source(text=text, digest=sha256_hex(text))

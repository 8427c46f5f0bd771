"""Call identity ι = (σ, π, ω) and canonical payload digests (pure, no I/O)."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from broker.errors import InputError

# A sandbox's fanout path indices are below this; a storage identity with a larger one
# exists only on the host (``moved_aside``).
MOVED_ASIDE = 1_000_000

_IDENTITY_TEXT = re.compile(r"^(?P<site>[^@]+)@(?P<path>[0-9.]*):(?P<occ>[0-9]+)$")


@dataclass(frozen=True, order=True)
class Identity:
    """A capability call's structural identity.

    ``site`` is the callsite σ computed by the host on the normalized AST,
    ``path`` the fanout path π (one branch index per fanout entered) and
    ``occurrence`` the zero-based counter ω for the pair (σ, π).
    """

    site: str
    path: tuple[int, ...]
    occurrence: int

    def __post_init__(self) -> None:
        if not self.site or "@" in self.site:
            raise ValueError(f"invalid site {self.site!r}")
        if any((not isinstance(i, int)) or i < 0 for i in self.path):
            raise ValueError(f"invalid fanout path {self.path!r}")
        if not isinstance(self.occurrence, int) or self.occurrence < 0:
            raise ValueError(f"invalid occurrence {self.occurrence!r}")

    @property
    def path_text(self) -> str:
        return ".".join(str(i) for i in self.path)

    def __str__(self) -> str:
        return f"{self.site}@{self.path_text}:{self.occurrence}"

    @classmethod
    def parse(cls, text: str) -> Identity:
        match = _IDENTITY_TEXT.match(text.strip())
        if not match:
            raise InputError(
                f"{text!r} is not an identity; write SITE@PATH:OCCURRENCE, "
                "for example 'orchestrate/#0@1.0:0' (copy it from `revise show`)"
            )
        path = tuple(int(p) for p in match["path"].split(".")) if match["path"] else ()
        return cls(match["site"], path, int(match["occ"]))

    def to_json(self) -> dict[str, Any]:
        return {"site": self.site, "path": list(self.path), "occurrence": self.occurrence}

    def moved_aside(self, revision: int) -> Identity:
        """Where ``revision`` stores new work at this identity after handing the result
        committed here to a moved call: a path index no sandbox frame can carry, so a
        later revision reaches the slot only by relocation, and the committed one stays."""
        return Identity(self.site, (*self.path, MOVED_ASIDE + revision), self.occurrence)


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace; rejects NaN, non-JSON types and text
    that is not valid Unicode (a lone surrogate, which no UTF-8 hash or store takes)."""
    _reject_non_finite(value)
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    at = None if text.isascii() else lone_surrogate_at(text)  # isascii: O(1) on ASCII text
    if at is not None:
        raise InputError(f"a string contains a lone surrogate {text[at]!r}, which is not "
                         "valid Unicode text; write the character itself (a JSON "
                         "\\ud83d\\ude00 pair, not half of one)")
    return text


def lone_surrogate_at(text: str) -> int | None:
    """Where ``text`` holds half a surrogate pair, which no UTF-8 encoder takes (JSON can
    escape one), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def utf8_bytes(what: str, text: str) -> bytes:
    """``text`` in UTF-8, or an InputError naming the lone surrogate it holds."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InputError(
            f"the {what} is not valid UTF-8 text: it has a lone surrogate "
            f"{text[exc.start]!r} at character {exc.start}; send text that encodes to "
            "UTF-8 (read files as bytes, or decode them with encoding='utf-8')") from None


def _reject_non_finite(value: Any) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError("payload contains NaN or infinity; use finite numbers")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(f"payload key {key!r} is not a string; JSON keys are strings")
            _reject_non_finite(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _reject_non_finite(item)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def payload_digest(payload: Any) -> str:
    """H(canonical(p)): key order and whitespace never change it."""
    return sha256_hex(canonical_json(payload))


def call_bytes(normalized_payload: Any, take: int = 1) -> bytes:
    """The bytes whose sha256 is ``call_digest`` (stored as the run's payload blob)."""
    value = normalized_payload if take == 1 else {"payload": normalized_payload, "take": take}
    return canonical_json(value).encode("utf-8")


def call_digest(normalized_payload: Any, take: int = 1) -> str:
    """The digest of one call: its normalized payload, and which take of it this is.

    The payload is normalized by the capability's schema first (defaults filled in,
    see ``broker.catalog``), so spelling a default out does not change the digest.
    ``take`` > 1 declares a deliberate further take of a payload already paid for.
    """
    return sha256_hex(call_bytes(normalized_payload, take))


IDEMPOTENCY_PREFIX = "revise-"


def request_key(run_token: str, capability: str, digest: str,
                repeat_at: Identity | None = None) -> str:
    """The idempotency key of one request: the run's random token (never its user-chosen
    id, so two deployments never share keys), the capability and the call digest. The
    same request carries the same key at any identity and in any revision of the run, so
    a retry after an unknown outcome is deduplicated by a provider that honours keys; a
    different payload (or take) never carries it. Where the ledger policy lets a repeat of
    a request pay again (warn, off), each identity asks for new work: ``repeat_at`` names
    it in the key, or the provider would answer every repeat with the first one's work."""
    at = "" if repeat_at is None else f"\0{repeat_at}"
    return IDEMPOTENCY_PREFIX + sha256_hex(f"{run_token}\0{capability}\0{digest}{at}")[:32]

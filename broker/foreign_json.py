"""JSON from outside the deployment (a provider's answer, a model's reply), made storable.

JSON may escape half of a UTF-16 surrogate pair (``"\\ud800"``), which Python decodes
to a lone surrogate: text that no UTF-8 encoder (a hash, the run store, the next
request that quotes it) accepts. Such a character becomes U+FFFD wherever it lands,
keys included. Only an escape makes one, so text without ``\\u`` is returned as parsed
and never walked. An integer longer than Python reads stays its digits (a string).
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def parse_foreign_json(text: bytes | str) -> Any:
    """``json.loads(text)`` with lone surrogates replaced and integers too long for Python
    to read kept as their digits; raises ValueError (not JSON) or RecursionError (nested
    deeper than the parser goes)."""
    value = json.loads(text, parse_int=_integer)
    escaped = b"\\u" in text if isinstance(text, bytes) else "\\u" in text
    return _without_surrogates(value) if escaped else value


def _integer(digits: str) -> int | str:
    """An integer, or its digits where it is longer than Python converts (4300 digits by
    default): one such number (in a usage count, say) made a whole paid answer unreadable."""
    try:
        return int(digits)
    except ValueError:
        return digits


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_surrogates(key): _without_surrogates(item)
                for key, item in value.items()}
    return value

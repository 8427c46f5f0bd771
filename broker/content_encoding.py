"""An HTTP answer's Content-Encoding undone within a size bound (pure).

httpx inflates each network chunk whole before a reader can count it: one 64 KiB chunk
of a gzip bomb becomes 64 MiB, so a size limit checked per chunk holds only about a
thousand times over, per call in flight. Here the raw chunks are inflated at most up to
one byte past the reader's limit, and nothing more is inflated after that. Only the
encodings ``ACCEPT_ENCODING`` asks for are read; anything else is an ``EncodingError``,
as is a stream that does not inflate.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable
from typing import Any

ACCEPT_ENCODING = "gzip, deflate"


class EncodingError(ValueError):
    """The answer's Content-Encoding is not one asked for, or its bytes do not decode."""

    partial: bytes = b""  # what was decoded before (``read_decoded``)


def read_decoded(chunks: Iterable[bytes], content_encoding: str | None, limit: int,
                 late: Callable[[], bool]) -> tuple[bytes, str | None]:
    """An answer's raw ``chunks`` decoded, and why the reading stopped early: ``"over"``
    (``limit + 1`` bytes are returned), ``"late"`` (``late()`` said so while chunks were
    still coming), or None (all of it read). A stream that does not decode raises
    ``EncodingError`` holding what was decoded before (``partial``)."""
    body = bytearray()
    try:
        decoder = BoundedDecoder(content_encoding, limit)
        for chunk in chunks:
            body += decoder.decode(chunk)
            if len(body) > limit:
                return bytes(body), "over"
            if late():
                return bytes(body), "late"
        body += decoder.finish()
    except EncodingError as exc:
        exc.partial = bytes(body)
        raise
    return bytes(body), "over" if len(body) > limit else None


class BoundedDecoder:
    """Feed it the raw chunks in order; it returns their decoded bytes, at most
    ``limit + 1`` in all (one past the limit tells the reader it was exceeded)."""

    def __init__(self, content_encoding: str | None, limit: int) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",")]
        codings = [c for c in codings if c not in ("", "identity")]
        if len(codings) > 1 or (codings and codings[0] not in ("gzip", "x-gzip", "deflate")):
            raise EncodingError(f"the answer's Content-Encoding {content_encoding!r} is not "
                                f"one asked for ({ACCEPT_ENCODING})")
        self._coding = codings[0] if codings else None
        self._inflater = self._new_inflater()
        self._room = limit + 1
        self._started = False

    def _new_inflater(self, raw_deflate: bool = False) -> Any:
        if self._coding is None:
            return None
        if self._coding == "deflate":  # zlib-wrapped as the RFC says; some servers send raw
            return zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS)
        return zlib.decompressobj(16 + zlib.MAX_WBITS)

    def decode(self, chunk: bytes) -> bytes:
        if self._room <= 0 or not chunk:
            return b""
        if self._inflater is None:
            out = chunk[:self._room]
        else:
            out = self._inflate(chunk)
        self._room -= len(out)
        return out

    def _inflate(self, chunk: bytes) -> bytes:
        assert self._inflater is not None
        try:
            out = self._inflater.decompress(chunk, self._room)
        except zlib.error as exc:
            if self._coding != "deflate" or self._started:
                raise EncodingError(f"the answer's {self._coding} stream is broken: "
                                    f"{exc}") from None
            self._inflater = self._new_inflater(raw_deflate=True)
            self._started = True
            return self._inflate(chunk)
        self._started = True
        return out

    def finish(self) -> bytes:
        """What the inflater still holds once every chunk was fed (within the bound)."""
        if self._inflater is None or self._room <= 0:
            return b""
        try:
            out = self._inflater.flush()[:self._room]
        except zlib.error as exc:
            raise EncodingError(f"the answer's {self._coding} stream is broken: {exc}"
                                ) from None
        self._room -= len(out)
        return out

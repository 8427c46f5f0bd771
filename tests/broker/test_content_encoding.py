"""An answer's Content-Encoding undone within a bound: a bomb never inflates past it."""

from __future__ import annotations

import gzip
import random
import zlib

import pytest

from broker.content_encoding import BoundedDecoder, EncodingError, read_decoded

TEXT = b'{"data": [{"b64_json": "iVBORw0KGgo="}]}' * 50
# mtime=0: gzip writes the time into its header, and a test id that held it differed
# between pytest-xdist's workers when their collections fell in different seconds.
GZIPPED = gzip.compress(TEXT, mtime=0)


def _chunks(data: bytes, size: int = 1000) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _decoded(encoding: str | None, data: bytes, limit: int = 1 << 20) -> bytes:
    decoder = BoundedDecoder(encoding, limit)
    return b"".join(decoder.decode(c) for c in _chunks(data)) + decoder.finish()


def _raw_deflate(data: bytes) -> bytes:
    squeeze = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return squeeze.compress(data) + squeeze.flush()


@pytest.mark.parametrize("encoding, data", [
    (None, TEXT), ("identity", TEXT), ("gzip", GZIPPED), ("x-gzip", GZIPPED),
    ("GZIP", GZIPPED),
    ("deflate", zlib.compress(TEXT)), ("deflate", _raw_deflate(TEXT)),  # both are sent
], ids=["none", "identity", "gzip", "x-gzip", "GZIP", "deflate", "raw deflate"])
def test_the_encodings_asked_for_decode(encoding: str | None, data: bytes) -> None:
    assert _decoded(encoding, data) == TEXT


@pytest.mark.parametrize("encoding", [None, "gzip", "deflate"])
def test_never_more_than_one_byte_past_the_limit(encoding: str | None) -> None:
    zeros = b"\0" * (64 << 20)
    data = {None: zeros, "gzip": gzip.compress(zeros), "deflate": zlib.compress(zeros)}
    decoder = BoundedDecoder(encoding, 1000)
    pieces = [decoder.decode(c) for c in _chunks(data[encoding], 1 << 16)]
    pieces.append(decoder.finish())
    assert sum(map(len, pieces)) == 1001  # the reader sees it is over, and no more came


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip", "gzip, br"])
def test_an_encoding_not_asked_for_is_refused(encoding: str) -> None:
    with pytest.raises(EncodingError, match="not one asked for"):
        BoundedDecoder(encoding, 1000)


@pytest.mark.parametrize("encoding, data", [
    ("gzip", b"not gzip at all"), ("gzip", GZIPPED[:10] + b"\xff" * 40),
    ("deflate", b"\xff\xfe not deflate"),
], ids=["not gzip", "gzip cut", "not deflate"])
def test_a_broken_stream_is_refused(encoding: str, data: bytes) -> None:
    with pytest.raises(EncodingError, match="stream is broken"):
        _decoded(encoding, data)


def test_read_decoded_says_why_it_stopped() -> None:
    chunks = _chunks(GZIPPED, 100)
    assert read_decoded(chunks, "gzip", 1 << 20, lambda: False) == (TEXT, None)
    body, cut = read_decoded(chunks, "gzip", 50, lambda: False)
    assert (len(body), cut) == (51, "over")
    assert read_decoded(_chunks(TEXT), None, 1 << 20, lambda: True) == (TEXT[:1000], "late")
    noise = random.Random(7).randbytes(20000)  # does not compress: its gzip is as long
    broken = gzip.compress(noise)[:10000] + b"\xff" * 10000
    with pytest.raises(EncodingError) as caught:
        read_decoded(_chunks(broken, 1000), "gzip", 1 << 20, lambda: False)
    assert caught.value.partial[:9000] == noise[:9000]  # what came before the break

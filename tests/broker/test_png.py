import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker import png


def _decode(data: bytes) -> tuple[int, int, list[bytes]]:
    """Minimal independent reader: check chunk CRCs, inflate IDAT, split filter-0 rows."""
    assert data.startswith(png.PNG_SIGNATURE)
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, colour, *_ = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert (depth, colour) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    stride = 1 + 3 * width
    rows = [raw[i * stride:(i + 1) * stride] for i in range(height)]
    assert all(row[0] == 0 for row in rows)
    assert b"IEND" in chunks
    return width, height, [row[1:] for row in rows]


def test_render_is_a_real_png_of_the_requested_size():
    data = png.render(b"seed", 64)
    width, height, rows = _decode(data)
    assert (width, height) == (64, 64)
    assert rows == png.pixels(b"seed", 64, 64)
    assert png.decode_size(data) == (64, 64)


def test_same_seed_same_bytes_different_seed_different_bytes():
    assert png.render(b"a") == png.render(b"a")
    assert png.render(b"a") != png.render(b"b")


def test_non_square():
    assert png.decode_size(png.render(b"x", 96, 64)) == (96, 64)


@pytest.mark.parametrize("sides", [(0, 4), (4, 0), (png.MAX_SIDE + 1, 4)])
def test_rejects_bad_sizes(sides):
    with pytest.raises(ValueError):
        png.render(b"x", *sides)


def test_decode_size_rejects_non_png():
    with pytest.raises(ValueError):
        png.decode_size(b"GIF89a" + b"\0" * 30)


@settings(max_examples=25, deadline=None, database=None)
@given(seed=st.binary(max_size=32), width=st.integers(1, 24), height=st.integers(1, 24))
def test_any_seed_decodes(seed, width, height):
    data = png.render(seed, width, height)
    assert _decode(data)[:2] == (width, height)
    assert png.render(seed, width, height) == data

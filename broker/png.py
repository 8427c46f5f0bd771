"""A tiny deterministic PNG encoder (stdlib only).

The local provider needs real image bytes that a viewer opens and that are
identical for identical inputs, so replay tests can compare artifacts byte
for byte. Pixels are a smooth gradient plus a few blocks, all derived from a
seed; the zlib level is fixed so the compressed stream is stable too.
"""

from __future__ import annotations

import hashlib
import struct
import zlib

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MEDIA_TYPE = "image/png"
_ZLIB_LEVEL = 9
MAX_SIDE = 512  # pure-Python pixels: keep stand-in images small


def _chunk(kind: bytes, body: bytes) -> bytes:
    crc = zlib.crc32(kind + body) & 0xFFFFFFFF
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)


def _palette(seed: bytes) -> bytes:
    """48 pseudo-random bytes derived from the seed (colours and block positions)."""
    return hashlib.sha256(seed).digest() + hashlib.sha256(b"png\0" + seed).digest()[:16]


def _pixel(x: int, y: int, width: int, height: int, key: bytes) -> tuple[int, int, int]:
    r0, g0, b0, r1, g1, b1 = key[:6]
    t = (x + y) / ((width - 1) + (height - 1) or 1)
    colour = [round(a + (b - a) * t) for a, b in zip((r0, g0, b0), (r1, g1, b1), strict=True)]
    # Four seed-placed blocks so different seeds differ in shape, not only in tint.
    for i in range(4):
        bx, by, bs = key[6 + 3 * i] % width, key[7 + 3 * i] % height, 4 + key[8 + 3 * i] % 12
        if bx <= x < bx + bs and by <= y < by + bs:
            colour = [255 - c for c in colour]
    return colour[0], colour[1], colour[2]


def pixels(seed: bytes, width: int = 64, height: int = 64) -> list[bytes]:
    """Rows of RGB bytes (3 per pixel) derived from ``seed``."""
    key = _palette(seed)
    return [bytes(c for x in range(width) for c in _pixel(x, y, width, height, key))
            for y in range(height)]


def encode_rgb(rows: list[bytes], width: int, height: int) -> bytes:
    """Encode RGB rows (3 bytes per pixel, no filter) as a PNG file."""
    if width <= 0 or height <= 0:
        raise ValueError(f"PNG dimensions must be positive, got {width}x{height}")
    if len(rows) != height or any(len(row) != 3 * width for row in rows):
        raise ValueError("each of the `height` rows must hold exactly 3 * width bytes")
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 on every scanline
    return (PNG_SIGNATURE + _chunk(b"IHDR", header)
            + _chunk(b"IDAT", zlib.compress(raw, _ZLIB_LEVEL)) + _chunk(b"IEND", b""))


def render(seed: bytes, width: int = 64, height: int | None = None) -> bytes:
    """A ``width`` x ``height`` PNG whose pixels derive from ``seed``; same seed, same bytes."""
    height = width if height is None else height
    if not (1 <= width <= MAX_SIDE and 1 <= height <= MAX_SIDE):
        raise ValueError(f"PNG sides must be between 1 and {MAX_SIDE}, got {width}x{height}")
    return encode_rgb(pixels(seed, width, height), width, height)


def decode_size(data: bytes) -> tuple[int, int]:
    """(width, height) from a PNG header; raises ValueError if it is not a PNG."""
    if len(data) < 24 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise ValueError("not a PNG file")
    width, height = struct.unpack(">II", data[16:24])
    return width, height

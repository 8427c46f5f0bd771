"""Host side of the sandbox socket: one connection, bounded messages, a deadline.

Everything that arrives here was written by the script's sandbox, so it is
hostile: a message is a 4-byte big-endian length and a UTF-8 JSON object, no
longer than ``message_bytes``, whose every field is within its type and limit
(``sandbox.inbound``, which bounds the depth of every nested field), and the frames
of one wave are within the wave limits; anything else, a second connection, or
silence past the deadline ends the revision with ``SandboxProtocolError`` (or
``SandboxTimeout``). The host never opens a path
inside the RPC directory; it only listens on the socket it created there.
"""

from __future__ import annotations

import json
import os
import re
import select
import socket
import struct
import threading
import time
from typing import Any

from broker.errors import SandboxProtocolError, SandboxTimeout
from sandbox.inbound import check_message
from sandbox.language import LIMITS, count_values

_HEADER = struct.Struct(">I")
# json.loads turns a \\uD800-\\uDFFF escape that is not half of a pair into a lone
# surrogate: a str the host can neither hash, store nor print (UnicodeEncodeError). Where
# the raw text has such an escape, the decoded message is checked whole.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_SCAN_CHUNK = 1 << 16  # bytes split at once: bounds the pieces a split holds


def _least_values(data: bytes) -> int:
    """JSON values at the least in ``data`` outside its strings: every comma adds one value
    and every bracket opens one."""
    return max(data.count(b",") + 1, data.count(b"[") + data.count(b"{"))


def more_values_than(data: bytes, limit: int) -> bool:
    """Does the JSON text ``data`` hold more than ``limit`` values? Read from its bytes
    before it is parsed, since parsing is what a hostile message targets: 8 MiB of ``{},``
    is 2.8 million dicts, 400 MB of host memory. Only C-speed passes over the bytes, in
    bounded memory; the text of strings is left out only when its commas and brackets
    could matter."""
    if len(data) <= 2 * limit or _least_values(data) <= limit:  # a value takes 2 bytes
        return False
    plain = data.replace(b"\\\\", b"").replace(b'\\"', b"")  # escapes, left to right
    commas, opens, inside = 0, 0, False
    for start in range(0, len(plain), _SCAN_CHUNK):
        pieces = plain[start:start + _SCAN_CHUNK].split(b'"')
        outside = b"".join(pieces[1 if inside else 0::2])
        commas += outside.count(b",")
        opens += outside.count(b"[") + outside.count(b"{")
        inside ^= len(pieces) % 2 == 0  # an odd number of quotes in the chunk
    return max(commas + 1, opens) > limit


def decode_message(data: bytes) -> dict[str, Any]:
    """Parse one message body; anything but a bounded JSON object is a protocol error."""
    if more_values_than(data, LIMITS["wave_values"]):
        raise SandboxProtocolError(f"the sandbox sent a message of more than "
                                   f"{LIMITS['wave_values']} JSON values (wave_values)")
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SandboxProtocolError(f"the sandbox sent a message that is not JSON "
                                   f"({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise SandboxProtocolError("the sandbox sent a message that is not a JSON object")
    if _SURROGATE_ESCAPE.search(data) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise SandboxProtocolError("the sandbox sent a string with a lone surrogate (not "
                                       "valid Unicode text)") from None
        except RecursionError:
            raise SandboxProtocolError("the sandbox sent a message nested too deeply") from None
    check_message(value)
    return value


def encode_message(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return _HEADER.pack(len(data)) + data


def ready(fd: Any, timeout: float, *, write: bool = False) -> bool:
    """Is ``fd`` readable (or writable) within ``timeout`` seconds? ``poll``, not
    ``select``: a busy sandbox worker holds more than 1024 descriptors, past which
    ``select`` refuses a descriptor outright."""
    poller = select.poll()
    poller.register(fd, select.POLLOUT if write else select.POLLIN)
    return bool(poller.poll(max(0.0, timeout) * 1000))


def _readable(fds: tuple[Any, ...], timeout: float) -> set[Any]:
    """Which of ``fds`` (sockets or descriptors) are readable within ``timeout`` s."""
    poller = select.poll()
    numbers = {(fd if isinstance(fd, int) else fd.fileno()): fd for fd in fds}
    for number in numbers:
        poller.register(number, select.POLLIN)
    return {numbers[number] for number, _ in poller.poll(max(0.0, timeout) * 1000)}


class Channel:
    """One sandbox connection. ``receive`` returns None when ``timeout`` passes quietly."""

    def __init__(self, listener: socket.socket, *, deadline: float, message_bytes: int) -> None:
        self._listener = listener
        self._deadline = deadline
        self._limit = message_bytes
        self._conn: socket.socket | None = None
        self._buffer = bytearray()
        self._send_lock = threading.Lock()
        self._closed = False
        self.last_size = 0  # bytes of the last message received (the host bounds waves)
        # ``interrupt`` wakes a ``receive`` at once (the host decided to stop the run).
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._wave = (0, 0, 0)  # frames, bytes and JSON values of the wave being received

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def accept(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the sandbox to connect; True once connected."""
        wait = max(0.0, min(timeout, self._remaining()))
        if not ready(self._listener, wait):
            if self._remaining() <= 0:
                raise SandboxTimeout("the sandbox did not connect before its deadline")
            return False
        conn, _ = self._listener.accept()
        conn.setblocking(False)
        self._conn = conn
        return True

    def refuse_extra_connections(self) -> None:
        """A second connection is someone else speaking for the sandbox: a violation."""
        if ready(self._listener, 0):
            extra, _ = self._listener.accept()
            extra.close()
            raise SandboxProtocolError("a second connection reached the sandbox socket")

    def send(self, message: dict[str, Any]) -> None:
        """Send one message (thread-safe); a sandbox that stopped reading ends the run."""
        data = encode_message(message)
        with self._send_lock:
            if self._closed or self._conn is None:
                return
            view = memoryview(data)
            while view:
                remaining = self._remaining()
                if remaining <= 0:
                    raise SandboxTimeout("the sandbox stopped reading the host's answers")
                if not ready(self._conn, min(remaining, 1.0), write=True):
                    continue
                try:
                    sent = self._conn.send(view)
                except (BrokenPipeError, ConnectionResetError):
                    return  # the sandbox is gone; its exit is reported elsewhere
                view = view[sent:]

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """One message, or None after ``timeout`` without a complete one.

        Raises ``SandboxProtocolError`` for an oversized or malformed message and
        ``EOFError`` when the sandbox closed the connection.
        """
        assert self._conn is not None
        end = time.monotonic() + timeout
        while True:
            message = self._take()
            if message is not None:
                return message
            wait = min(end, self._deadline) - time.monotonic()
            if wait <= 0:
                return None
            woken = _readable((self._conn, self._wake_r), wait)
            if self._wake_r in woken:
                self._drain_wake()
                return None
            if not woken:
                continue
            try:
                chunk = self._conn.recv(1 << 16)
            except BlockingIOError:
                continue
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError("the sandbox closed the connection")
            self._buffer += chunk

    def _take(self) -> dict[str, Any] | None:
        if len(self._buffer) < _HEADER.size:
            return None
        (size,) = _HEADER.unpack_from(self._buffer)
        if size > self._limit:
            raise SandboxProtocolError(f"the sandbox sent a {size}-byte message; the limit is "
                                       f"{self._limit}")
        if len(self._buffer) < _HEADER.size + size:
            return None
        data = bytes(self._buffer[_HEADER.size:_HEADER.size + size])
        del self._buffer[:_HEADER.size + size]
        self.last_size = size
        message = decode_message(data)
        self._count_wave(message, size)
        return message

    def _count_wave(self, message: dict[str, Any], size: int) -> None:
        """The wave a batch belongs to within wave_frames, wave_bytes and wave_values: the
        host holds every frame of a wave until its last batch (``more`` false) arrives."""
        if message.get("t") != "batch":
            return
        count, total, values = self._wave
        frames = message["frames"]
        if frames:
            count += len(frames)
            total += size
            values += count_values(frames, LIMITS["wave_values"] - values)
        for name, seen in (("wave_frames", count), ("wave_bytes", total),
                           ("wave_values", values)):
            if seen > LIMITS[name]:
                raise SandboxProtocolError(f"the sandbox sent a wave past {LIMITS[name]} "
                                           f"({name})")
        self._wave = (count, total, values) if message.get("more") is True else (0, 0, 0)

    def interrupt(self) -> None:
        """Make a ``receive`` waiting in another thread return None now."""
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # already woken, or closed

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 64):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        with self._send_lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
        self._listener.close()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

"""Host side of the sandbox socket: one connection, bounded messages, a deadline.

Everything that arrives here was written by the script's sandbox, so it is
hostile: a message is a 4-byte big-endian length and a UTF-8 JSON object, no
longer than ``message_bytes`` and no deeper than ``MAX_DEPTH``; anything else,
a second connection, or silence past the deadline ends the revision with
``SandboxProtocolError`` (or ``SandboxTimeout``). The host never opens a path
inside the RPC directory; it only listens on the socket it created there.
"""

from __future__ import annotations

import json
import re
import select
import socket
import struct
import threading
import time
from typing import Any

from broker.errors import SandboxProtocolError, SandboxTimeout
from sandbox.language import MAX_VALUE_DEPTH, too_deep

_HEADER = struct.Struct(">I")
# A frame's payload sits three levels in (message, frames, frame); a result, one.
MAX_DEPTH = MAX_VALUE_DEPTH + 4
# json.loads turns a \\uD800-\\uDFFF escape that is not half of a pair into a lone
# surrogate: a str the host can neither hash, store nor print (UnicodeEncodeError). Where
# the raw text has such an escape, the decoded message is checked whole.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_message(data: bytes) -> dict[str, Any]:
    """Parse one message body; anything but a bounded JSON object is a protocol error."""
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SandboxProtocolError(f"the sandbox sent a message that is not JSON "
                                   f"({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise SandboxProtocolError("the sandbox sent a message that is not a JSON object")
    if too_deep(value, MAX_DEPTH):
        raise SandboxProtocolError(f"the sandbox sent a message nested deeper than {MAX_DEPTH}")
    if _SURROGATE_ESCAPE.search(data) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise SandboxProtocolError("the sandbox sent a string with a lone surrogate (not "
                                       "valid Unicode text)") from None
    return value


def encode_message(message: dict[str, Any]) -> bytes:
    data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode("utf-8")
    return _HEADER.pack(len(data)) + data


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

    @property
    def connected(self) -> bool:
        return self._conn is not None

    def _remaining(self) -> float:
        return self._deadline - time.monotonic()

    def accept(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the sandbox to connect; True once connected."""
        wait = max(0.0, min(timeout, self._remaining()))
        readable, _, _ = select.select([self._listener], [], [], wait)
        if not readable:
            if self._remaining() <= 0:
                raise SandboxTimeout("the sandbox did not connect before its deadline")
            return False
        conn, _ = self._listener.accept()
        conn.setblocking(False)
        self._conn = conn
        return True

    def refuse_extra_connections(self) -> None:
        """A second connection is someone else speaking for the sandbox: a violation."""
        readable, _, _ = select.select([self._listener], [], [], 0)
        if readable:
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
                _, writable, _ = select.select([], [self._conn], [], min(remaining, 1.0))
                if not writable:
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
            readable, _, _ = select.select([self._conn], [], [], wait)
            if not readable:
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
        return decode_message(data)

    def close(self) -> None:
        with self._send_lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
        self._listener.close()

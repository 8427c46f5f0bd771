"""A provider that answers every request after exactly ``latency`` seconds (issue 26).

OpenAI-compatible ``POST /v1/images/generations`` (a small base64 PNG), run in a
process of its own so its threads never share an interpreter with a system under
test. It counts what a real provider would bill: every request it answered is a
charge, and a second charge for the same prompt is a duplicate. ``GET /stats``
returns ``{"charged", "duplicates", "peak", "in_flight"}`` (peak: the most requests
it was working on at once); ``POST /reset`` starts a new count.

    python bench/peers/slow_provider.py --latency 2 --port-file PORT
"""

from __future__ import annotations

import argparse
import base64
import json
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

IMAGES = "/v1/images/generations"


def _tiny_png() -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    header = (8).to_bytes(4, "big") + (8).to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    pixels = zlib.compress(b"".join(b"\x00" + b"\x80\x40\x20" * 8 for _ in range(8)))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)
            + chunk(b"IEND", b""))


class Ledger:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.prompts: Counter[str] = Counter()
            self.in_flight = 0
            self.peak = 0

    def enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)

    def leave(self, prompt: str) -> None:
        with self._lock:
            self.in_flight -= 1
            self.prompts[prompt] += 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            charged = sum(self.prompts.values())
            return {"charged": charged, "duplicates": charged - len(self.prompts),
                    "peak": self.peak, "in_flight": self.in_flight}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # The headers and the body leave in two writes; with Nagle's algorithm the body then
    # waits for the client's delayed ACK of the headers (up to 40 ms) on a kept-alive
    # connection. Real providers' servers send at once.
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._json(200, self.server.ledger.stats())

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.path == "/reset":
            self.server.ledger.reset()
            self._json(200, {})
            return
        if self.path != IMAGES:
            self._json(404, {"error": {"message": f"no route {self.path}"}})
            return
        prompt = str(json.loads(body or b"{}").get("prompt", ""))
        ledger = self.server.ledger
        ledger.enter()
        try:
            time.sleep(self.server.latency)
        finally:
            ledger.leave(prompt)
        self._json(200, {"created": int(time.time()),
                         "data": [{"b64_json": self.server.image}]})

    def _json(self, status: int, value: Any) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def __init__(self, latency: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.latency = latency
        self.ledger = Ledger()
        self.image = base64.b64encode(_tiny_png()).decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=2.0)
    parser.add_argument("--port-file", type=Path, required=True)
    opts = parser.parse_args()
    server = _Server(opts.latency)
    opts.port_file.write_text(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()

"""A blob store on another origin, over HTTPS: where a real image provider's answer points
(a signed URL on a storage host) when it answers with the image's address.

Its certificate is made for the run with the ``openssl`` command (self-signed for
``localhost`` and 127.0.0.1); a client trusts it through ``ssl_context()``. Every request
is recorded with its headers, so a test can see what a client sent to a host that is not
the provider.
"""

from __future__ import annotations

import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class BlobStore:
    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.requests: list[dict[str, str]] = []  # each request's headers (lower-case names)
        self._dir = tempfile.TemporaryDirectory(prefix="revise-blobs-")
        self._cert = Path(self._dir.name) / "cert.pem"
        self._httpd: ThreadingHTTPServer | None = None

    def __enter__(self) -> BlobStore:
        key = Path(self._dir.name) / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
             "-keyout", str(key), "-out", str(self._cert)],
            check=True, capture_output=True)
        served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        served.load_cert_chain(self._cert, key)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.socket = served.wrap_socket(self._httpd.socket, server_side=True)
        self._httpd.blobs = self  # type: ignore[attr-defined]
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True,
                         name="fake-blobs").start()
        return self

    def __exit__(self, *_: Any) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        self._dir.cleanup()

    def url(self, path: str) -> str:
        assert self._httpd is not None
        return f"https://localhost:{self._httpd.server_address[1]}{path}"

    def put(self, path: str, data: bytes) -> str:
        """Keep ``data`` at ``path``; its URL."""
        self.files[path] = data
        return self.url(path)

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts this store's certificate."""
        return ssl.create_default_context(cafile=str(self._cert))


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        blobs: BlobStore = self.server.blobs  # type: ignore[attr-defined]
        blobs.requests.append({k.lower(): v for k, v in self.headers.items()})
        data = blobs.files.get(self.path.split("?", 1)[0])
        self.send_response(200 if data is not None else 404)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")

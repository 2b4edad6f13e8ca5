"""A static file server on 127.0.0.1 with HTTP Range support and injectable faults.

The stdlib ``SimpleHTTPRequestHandler`` ignores ``Range``; a CDN honours it, and resumable downloads
of multi-GB models depend on it. Faults: cut a file after N bytes (once), stream endless data past a
file's end, and switch the served directory (replayed old repository).
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

_RANGE_RE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Faults:
    cut_once: dict[str, int] = field(default_factory=dict)   # path suffix -> bytes before closing
    endless: set[str] = field(default_factory=set)           # path suffixes served with extra data
    drip: dict[str, float] = field(default_factory=dict)     # path suffix -> seconds between single bytes
    gzip: set[str] = field(default_factory=set)              # path suffixes sent gzip-encoded regardless
    requests: list[tuple[str, str | None]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        path = unquote(urlparse(self.path).path)
        faults = self.server.faults
        range_header = self.headers.get("Range")
        faults.requests.append((path, range_header))
        root = self.server.root.resolve()
        file = (root / path.lstrip("/")).resolve()
        if root not in file.parents or not file.is_file():
            self.send_error(404)
            return
        data = file.read_bytes()
        start, status = 0, 200
        if range_header:
            match = _RANGE_RE.match(range_header)
            if not match or int(match.group(1)) >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.end_headers()
                return
            start, status = int(match.group(1)), 206
        body = data[start:]
        if any(path.endswith(s) for s in faults.endless):
            self.send_response(200)
            self.end_headers()
            try:
                self.wfile.write(body)
                for _ in range(200):  # "endless": far more than declared, until the client hangs up
                    self.wfile.write(b"\0" * 65536)
            except OSError:
                pass
            return
        if any(path.endswith(s) for s in faults.gzip):
            import gzip

            packed = gzip.compress(body)
            self.send_response(status)
            self.send_header("Content-Length", str(len(packed)))
            self.send_header("Content-Encoding", "gzip")
            self.end_headers()
            self.wfile.write(packed)
            return
        drip = next((delay for s, delay in faults.drip.items() if path.endswith(s)), None)
        if drip is not None:  # a mirror that drips: each byte in time for the read timeout, never done
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                for i in range(len(body)):
                    self.wfile.write(body[i:i + 1])
                    self.wfile.flush()
                    time.sleep(drip)
            except OSError:
                pass
            return
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.end_headers()
        cut = next((s for s in faults.cut_once if path.endswith(s)), None)
        if cut is not None:
            limit = faults.cut_once.pop(cut)
            self.wfile.write(body[:limit])
            self.wfile.flush()
            self.close_connection = True
            return
        try:
            self.wfile.write(body)
        except OSError:
            pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, root: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = root
        self.faults = Faults()


class RangeServer:
    """``with RangeServer(dir) as srv: srv.url`` -- serves ``dir`` until the block ends."""

    def __init__(self, root: Path) -> None:
        self._server = _Server(Path(root))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def faults(self) -> Faults:
        return self._server.faults

    @property
    def root(self) -> Path:
        return self._server.root

    @root.setter
    def root(self, value: Path) -> None:
        self._server.root = Path(value)

    def __enter__(self) -> RangeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

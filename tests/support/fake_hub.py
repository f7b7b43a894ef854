"""A local stand-in for the Hugging Face Hub: serves files at /{repo}/resolve/main/{file} on
loopback, with HTTP Range requests, 404 for what it lacks and 401 for gated repos. Point
HF_ENDPOINT at `hub.url`; `hub.requests` records every (method, path, Range) it answered."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


class FakeHub:
    def __init__(self) -> None:
        self.files: dict[str, dict[str, bytes]] = {}  # repo id → filename → content
        self.gated: set[str] = set()
        self.requests: list[tuple[str, str, str | None]] = []
        self.url = ""

    def add(self, repo_id: str, filename: str, content: bytes) -> None:
        self.files.setdefault(repo_id, {})[filename] = content

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                path = unquote(urlparse(self.path).path)
                byte_range = self.headers.get("Range")
                hub.requests.append(("GET", path, byte_range))
                parts = path.strip("/").split("/")
                if len(parts) < 5 or parts[2:4] != ["resolve", "main"]:
                    self.send_error(404)
                    return
                repo_id, filename = "/".join(parts[:2]), "/".join(parts[4:])
                if repo_id in hub.gated:
                    self.send_error(401, "gated")
                    return
                content = hub.files.get(repo_id, {}).get(filename)
                if content is None:
                    self.send_error(404)
                    return
                status = 200
                if byte_range and byte_range.startswith("bytes="):
                    first, _, last = byte_range[6:].partition("-")
                    start, end = int(first), min(int(last), len(content) - 1)
                    content, status = content[start : end + 1], 206
                self.send_response(status)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

        return Handler


@contextmanager
def serve_fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

"""A local stand-in for the Hugging Face Hub: serves files at /{repo}/resolve/{main|sha}/{file} on
loopback (GET and HEAD, with the headers huggingface_hub reads: X-Repo-Commit, ETag), HTTP Range
requests (open-ended too, as a resumed download asks), 404 for what it lacks and 401 for gated
repos, and the two API calls snapshot_download makes (/api/models/{repo}/revision/{rev} and
/api/models/{repo}/tree/{rev}). Point HF_ENDPOINT at `hub.url`; `hub.requests` records every
(method, path, Range) it answered; `chunk_delay_s` slows file bodies down (for interruptions)."""

from __future__ import annotations

import hashlib
import json
import threading
import time
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
        self.sha = "5eed0ff1ce5eed0ff1ce5eed0ff1ce5eed0ff1ce"  # the commit every repo is at
        self.chunk_delay_s = 0.0  # > 0: file bodies go out 64 KiB at a time, this long apart

    def add(self, repo_id: str, filename: str, content: bytes) -> None:
        self.files.setdefault(repo_id, {})[filename] = content

    def handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._answer(head=True)

            def do_GET(self) -> None:
                self._answer(head=False)

            def _json(self, data: object) -> None:
                body = json.dumps(data).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _error(self, status: int, code: str) -> None:
                body = json.dumps({"error": code}).encode()
                self.send_response(status)
                self.send_header("X-Error-Code", code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _answer(self, head: bool) -> None:
                path = unquote(urlparse(self.path).path)
                byte_range = self.headers.get("Range")
                hub.requests.append(("HEAD" if head else "GET", path, byte_range))
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 6:
                    # /api/models/{repo}/revision/{rev} (repo_info) and /api/models/{repo}/tree/{rev} (list_repo_tree)
                    repo_id = "/".join(parts[2:4])
                    if repo_id in hub.gated:
                        self.send_error(401, "gated")
                    elif repo_id not in hub.files:
                        self._error(404, "RepoNotFound")  # the header huggingface_hub reads, as the Hub sends it
                    elif parts[5] not in ("main", hub.sha):
                        self._error(404, "RevisionNotFound")
                    elif parts[4] == "revision":
                        files = hub.files[repo_id]
                        self._json({"id": repo_id, "sha": hub.sha, "siblings": [{"rfilename": f} for f in files]})
                    elif parts[4] == "tree":
                        self._json(
                            [
                                {"type": "file", "path": name, "size": len(data), "oid": _oid(data)}
                                for name, data in hub.files[repo_id].items()
                            ]
                        )
                    else:
                        self.send_error(404)
                    return
                if len(parts) < 5 or parts[2] != "resolve" or parts[3] not in ("main", hub.sha):
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
                status, body, total = 200, content, len(content)
                if byte_range and byte_range.startswith("bytes="):
                    first, _, last = byte_range[6:].partition("-")
                    start = int(first)
                    end = min(int(last), total - 1) if last else total - 1
                    body, status = content[start : end + 1], 206
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("X-Repo-Commit", hub.sha)
                self.send_header("ETag", f'"{_oid(content)}"')
                if status == 206:
                    self.send_header("Content-Range", f"bytes {total - len(body)}-{total - 1}/{total}")
                self.end_headers()
                if head:
                    return
                if hub.chunk_delay_s <= 0:
                    self.wfile.write(body)
                    return
                for at in range(0, len(body), 65536):
                    try:
                        self.wfile.write(body[at : at + 65536])
                        self.wfile.flush()
                    except OSError:  # the client went away (an interrupted download)
                        return
                    time.sleep(hub.chunk_delay_s)

        return Handler


def _oid(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@contextmanager
def serve_fake_hub() -> Iterator[FakeHub]:
    hub = FakeHub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), hub.handler())
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    # shutdown() waits for serve_forever's next look at its flag: every 0.05 s, not the default 0.5 s
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)

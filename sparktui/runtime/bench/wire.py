"""A streaming HTTP/1.1 client whose receive times come from the kernel, not from this process.

`sparktui bench` measures TTFT and token gaps on the client. A timestamp taken in Python when a
read returns is late by however long this process waited for a core, for the GIL or for its
event loop: on a loaded box that was 110–722 ms (the server runs on the same cores). Here every
socket has SO_TIMESTAMPNS on, so the kernel stamps each packet as it arrives and `recvmsg`
returns that stamp; a reader that runs late still learns when the bytes came.

A read returns the stamp of the last packet it consumed, so bytes that queued up while the reader
was away would all take the latest one. The reader therefore peeks at what is queued, cuts it into
the server's own HTTP chunks (vLLM writes one per SSE event) and consumes one chunk per read: each
chunk keeps the stamp of the packet that carried it.

The send time is taken just before the request's single write (headers and body together: two
writes would meet Nagle's algorithm and the server's delayed ACK).

Stamps are in time.perf_counter()'s timebase. One connection per user, reused (keep-alive), each
used by one thread at a time. Plain http only (sparktui's servers bind loopback or a LAN address).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# Linux's values (asm-generic/socket.h); Python does not export them.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
SCM_TIMESTAMPNS = SO_TIMESTAMPNS
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux
PEEK_BYTES = 1 << 16
POLL_S = 0.25  # how often a blocked read looks at the stop flag


class WireError(Exception):
    """The connection failed or the server broke the protocol (message says which)."""


class Stopped(Exception):
    """The caller's stop flag was set while waiting."""


@dataclass(frozen=True)
class ResponseHead:
    """The status line and headers of an HTTP response; its body is read apart (`_body`)."""

    status: int
    headers: dict[str, str]


def _perf_offset_ns() -> int:
    """time.time_ns() − time.perf_counter_ns(), from the tightest of a few paired readings."""
    best: tuple[int, int] | None = None
    for _ in range(5):
        a = time.perf_counter_ns()
        wall = time.time_ns()
        b = time.perf_counter_ns()
        if best is None or b - a < best[0]:
            best = (b - a, wall - (a + b) // 2)
    assert best is not None
    return best[1]


class Connection:
    """One keep-alive connection to host:port."""

    def __init__(self, host: str, port: int, *, connect_timeout: float = 5.0) -> None:
        self.host, self.port = host, port
        self.sock = socket.create_connection((host.strip("[]"), port), timeout=connect_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.kernel_stamps = True
        except OSError:
            self.kernel_stamps = False  # not Linux: stamps are taken when a read returns
        self.sock.settimeout(POLL_S)
        self.offset_ns = _perf_offset_ns()
        self.reusable = True

    def close(self) -> None:
        self.reusable = False
        self.sock.close()

    # -- reading, one stamped piece at a time

    def _wait(self, stop: threading.Event | None, deadline: float) -> None:
        if stop is not None and stop.is_set():
            raise Stopped()
        if time.perf_counter() > deadline:
            raise WireError("timed out waiting for the server")

    def _peek(self, stop: threading.Event | None, deadline: float) -> bytes:
        while True:
            self._wait(stop, deadline)
            try:
                data = self.sock.recv(PEEK_BYTES, socket.MSG_PEEK)
            except TimeoutError:
                continue
            except OSError as exc:
                raise WireError(f"{type(exc).__name__}: {exc}") from None
            if not data:
                raise WireError("the server closed the connection")
            return data

    def _take(self, n: int) -> tuple[float, bytes]:
        """Consume n bytes already queued (a peek saw them); their arrival time, perf_counter base."""
        out, stamp = bytearray(), None
        while len(out) < n:
            try:
                data, ancillary, _, _ = self.sock.recvmsg(n - len(out), socket.CMSG_SPACE(_TIMESPEC.size))
            except OSError as exc:
                raise WireError(f"{type(exc).__name__}: {exc}") from None
            if not data:
                raise WireError("the server closed the connection")
            out += data
            for level, kind, raw in ancillary:
                if level == socket.SOL_SOCKET and kind == SCM_TIMESTAMPNS and len(raw) >= _TIMESPEC.size:
                    sec, nsec = _TIMESPEC.unpack_from(raw)
                    stamp = (sec * 1_000_000_000 + nsec - self.offset_ns) / 1e9
        return (stamp if stamp is not None else time.perf_counter()), bytes(out)

    # -- one request

    def request(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        timeout_s: float,
        stop: threading.Event | None = None,
        on_sent: Callable[[float], None] | None = None,
    ) -> tuple[ResponseHead, Iterator[tuple[float, bytes]]]:
        """Send one request; the response head and an iterator of (arrival, body piece).

        For a chunked body each piece is one HTTP chunk's payload, stamped with its own arrival."""
        deadline = time.perf_counter() + timeout_s
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        wire = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        sent = time.perf_counter()
        try:
            self.sock.sendall(wire)
        except OSError as exc:
            self.close()
            raise WireError(f"{type(exc).__name__}: {exc}") from None
        if on_sent is not None:
            on_sent(sent)
        response = self._head(stop, deadline)
        return response, self._body(response, stop, deadline)

    def _head(self, stop: threading.Event | None, deadline: float) -> ResponseHead:
        while True:
            queued = self._peek(stop, deadline)
            end = queued.find(b"\r\n\r\n")
            if end >= 0:
                break
            if len(queued) >= PEEK_BYTES:
                raise WireError("the response head is larger than 64 KiB")
            time.sleep(0.001)  # the rest of the head is on its way
        _, head = self._take(end + 4)
        first, *rest = head.decode("latin-1").split("\r\n")
        parts = first.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise WireError(f"not an HTTP/1.x response: {first[:80]!r}")
        fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in rest if line)}
        if fields.get("connection", "").lower() == "close" or parts[0] == "HTTP/1.0":
            self.reusable = False
        return ResponseHead(int(parts[1]), fields)

    def _body(
        self, response: ResponseHead, stop: threading.Event | None, deadline: float
    ) -> Iterator[tuple[float, bytes]]:
        try:
            if "chunked" in response.headers.get("transfer-encoding", "").lower():
                yield from self._chunks(stop, deadline)
            elif "content-length" in response.headers:
                left = int(response.headers["content-length"])
                while left > 0:
                    queued = self._peek(stop, deadline)
                    stamp, data = self._take(min(left, len(queued)))
                    left -= len(data)
                    yield stamp, data
            else:  # until the server closes
                self.reusable = False
                while True:
                    try:
                        queued = self._peek(stop, deadline)
                    except WireError:
                        return
                    yield self._take(len(queued))
        except BaseException:
            self.close()  # a body read only in part leaves the connection unusable
            raise

    def _chunks(self, stop: threading.Event | None, deadline: float) -> Iterator[tuple[float, bytes]]:
        while True:
            queued = self._peek(stop, deadline)
            line_end = queued.find(b"\r\n")
            if line_end < 0:
                time.sleep(0.001)
                continue
            try:
                size = int(queued[:line_end].split(b";")[0], 16)
            except ValueError:
                raise WireError(f"bad chunk size {queued[:line_end][:20]!r}") from None
            frame = line_end + 2 + size + 2
            if size == 0:  # the last chunk: no trailers from vLLM's server
                self._take(line_end + 4)
                return
            while len(queued) < frame:  # the chunk is not all here yet: wait for the rest
                time.sleep(0.001)
                queued = self._peek(stop, deadline)
            stamp, data = self._take(frame)
            yield stamp, data[line_end + 2 : line_end + 2 + size]


def sse_events(pieces: Iterator[tuple[float, bytes]]) -> Iterator[tuple[float, bytes]]:
    """(arrival, payload) of each SSE `data:` line; an event split over pieces takes the arrival of
    the piece that completed it."""
    pending = b""
    for stamp, data in pieces:
        *lines, pending = (pending + data).split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                yield stamp, line[5:].strip()

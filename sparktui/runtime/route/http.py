"""A small HTTP/1.1 server on asyncio streams, framed by h11 (httpx's own HTTP/1.1 parser, already
installed with it): keep-alive, chunked replies for streams, nothing else. The route needs a
handful of JSON endpoints and byte-for-byte streaming; a web framework would add a dependency and
its own buffering for nothing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import h11

MAX_BODY = 64 << 20  # a request body larger than this gets 413
READ_SIZE = 65536


@dataclass
class Request:
    method: str
    path: str  # without the query
    headers: dict[str, str]  # lower-case names
    body: bytes


@dataclass
class Response:
    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    stream: AsyncIterator[bytes] | None = None  # sent as it comes (chunked), instead of body
    done: Callable[[], Awaitable[None]] | None = None  # always awaited once the reply ended or failed


def json_response(status: int, payload: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, [("content-type", "application/json"), *(headers or [])], json.dumps(payload).encode())


Handler = Callable[[Request], Awaitable[Response]]


async def serve_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, handler: Handler) -> None:
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            request = await _read_request(conn, reader, writer)
            if request is None:
                return
            response = await handler(request)
            await _send(conn, writer, response)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (ConnectionError, h11.ProtocolError, asyncio.IncompleteReadError):
        return
    finally:
        writer.close()
        try:
            await writer.wait_closed()
        except (ConnectionError, OSError):
            pass


async def _read_request(
    conn: h11.Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> Request | None:
    head: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(READ_SIZE)
            conn.receive_data(data)  # b"": the peer closed
            continue
        if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None
        if isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > MAX_BODY:
                await _send(conn, writer, json_response(413, {"error": "request body too large"}))
                return None
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            target = head.target.decode("latin-1")
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in head.headers}
            return Request(head.method.decode("ascii"), target.split("?", 1)[0], headers, bytes(body))


async def _send(conn: h11.Connection, writer: asyncio.StreamWriter, response: Response) -> None:
    try:
        headers = [(k, v) for k, v in response.headers if k.lower() not in ("content-length", "transfer-encoding")]
        if response.stream is None:
            headers.append(("content-length", str(len(response.body))))
        writer.write(conn.send(h11.Response(status_code=response.status, headers=headers)))
        if response.stream is None:
            if response.body:
                writer.write(conn.send(h11.Data(data=response.body)))
        else:
            await writer.drain()
            async for chunk in response.stream:
                if chunk:
                    writer.write(conn.send(h11.Data(data=chunk)))
                    await writer.drain()  # each chunk leaves as it came: no buffering
        writer.write(conn.send(h11.EndOfMessage()))
        await writer.drain()
    finally:
        if response.done is not None:
            await response.done()

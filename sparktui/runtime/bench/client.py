"""The streams of one run: a reader thread per request on a keep-alive connection per user
(wire: each chunk stamped by the kernel), the prompts, and the SSE events read into a
`RequestRecord`. This process's event loop may run late on a loaded box; the figures must not."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

import httpx

from sparktui.errors import UserError
from sparktui.runtime.bench import wire
from sparktui.runtime.bench.request_record import RequestRecord
from sparktui.runtime.bench.results import BenchSettings
from sparktui.runtime.bench.target import Target

WARM_UP_WORDS = 32

# Random words for prompts: common, short, so most tokenizers give about one token each.
_WORD_TEXT = (
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend "
    "father power hour game line end member law car city community name president team "
    "minute idea kid body information back parent face others level office door health person "
    "art war history party result change morning reason research girl guy moment air teacher "
    "force education river stone green blue"
)
_WORDS = tuple(_WORD_TEXT.split())


class ServerGone(Exception):
    """The server stopped answering, exited, or its guard ended the run."""


class Cancelled(Exception):
    """The run was cancelled (the panel's key, Ctrl-C): what was measured stays."""


class StreamClient:
    """Sends the run's requests and reads their streams; `generating` and `wake` tell the level's
    watcher that tokens have started coming back."""

    def __init__(
        self, target: Target, settings: BenchSettings, http: httpx.AsyncClient, sweep_max: int | None = None
    ) -> None:
        self.target, self.settings, self.http = target, settings, http
        self.model = ""
        self.words = settings.prompt_tokens  # words per prompt, calibrated by the warm-up
        self.word_ratio = 1.0  # words per token of the server's tokenizer, from the warm-up
        self.rng = random.Random(0x5A7C)
        self.generating = asyncio.Event()  # set at a level's first token
        self.wake = asyncio.Event()  # wakes the watcher: the first token, or the level's end
        self.loop = asyncio.get_running_loop()
        self.auth = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        where = urlsplit(target.url)
        if where.scheme != "http" or where.hostname is None or where.port is None:
            raise UserError(f"{target.url}: the benchmark speaks plain http to host:port only")
        self.host, self.port = where.hostname, where.port
        most = max([*settings.users, sweep_max]) if sweep_max else max(settings.users)
        self.readers = ThreadPoolExecutor(max_workers=most + 1, thread_name_prefix="bench-reader")
        self.idle: list[wire.Connection] = []
        self.idle_lock = threading.Lock()
        self.halt = threading.Event()  # the reader threads stop waiting (cancelled, or the level failed)

    def close(self) -> None:
        self.halt.set()
        self.readers.shutdown(wait=True, cancel_futures=True)
        with self.idle_lock:
            for conn in self.idle:
                conn.close()
            self.idle.clear()

    def begin_level(self) -> None:
        self.generating, self.wake = asyncio.Event(), asyncio.Event()

    async def warm_up(self) -> None:
        """One unmeasured request: surfaces a refusal early, warms the server, sizes the prompts.

        It sends a few words only: a tokenizer may cut each word into several tokens, and a
        prompt of `prompt_tokens` words could then exceed the model's length."""
        self.words = min(self.settings.prompt_tokens, WARM_UP_WORDS)
        record = await self.request(max_tokens=min(4, self.settings.output_tokens))
        if record.error is not None:
            raise UserError(f"the warm-up request failed: {record.error}")
        if record.prompt_tokens:
            self.word_ratio = self.words / record.prompt_tokens
            self.words = max(1, round(self.settings.prompt_tokens * self.word_ratio))

    # -- one request

    def prompt(self) -> str:
        return " ".join(self.rng.choice(_WORDS) for _ in range(self.words))

    def body(self, max_tokens: int) -> tuple[str, dict[str, Any]]:
        common: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "ignore_eos": True,  # vLLM: generate exactly max_tokens
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if self.settings.api == "chat":
            return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": self.prompt()}]}
        return "/v1/completions", {**common, "prompt": self.prompt()}

    async def request(self, max_tokens: int | None = None) -> RequestRecord:
        path, body = self.body(max_tokens or self.settings.output_tokens)
        record = RequestRecord(sent=time.perf_counter())
        # A reader thread per stream, stamping with the kernel's receive times (wire): this
        # loop may run late on a loaded box, the figures must not.
        loop = asyncio.get_running_loop()
        lost = await loop.run_in_executor(self.readers, self._stream, path, json.dumps(body).encode(), record)
        if record.error is not None and record.status in (401, 404):
            raise UserError(f"{self.target.url}{path}: {record.error}")
        if lost and not await self.alive():
            raise ServerGone(f"the server at {self.target.url} stopped answering mid-run ({record.error})")
        return record

    def _connection(self) -> wire.Connection:
        with self.idle_lock:
            if self.idle:
                return self.idle.pop()
        return wire.Connection(self.host, self.port)

    def _release(self, conn: wire.Connection) -> None:
        if conn.reusable:
            with self.idle_lock:
                self.idle.append(conn)
        else:
            conn.close()

    def _stream(self, path: str, body: bytes, record: RequestRecord) -> bool:
        """One request, in a reader thread; True when the connection failed (is the server gone?)."""
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream", **self.auth}
        conn: wire.Connection | None = None
        try:
            conn = self._connection()
            response, pieces = conn.request(
                "POST",
                path,
                body,
                headers,
                timeout_s=self.settings.request_timeout_s,
                stop=self.halt,
                on_sent=lambda at: setattr(record, "sent", at),
            )
            record.status = response.status
            if response.status != 200:
                text = b"".join(data for _, data in pieces).decode(errors="replace")
                record.error = _http_error(response.status, text)
            else:
                for stamp, data in wire.sse_events(pieces):
                    if self._event(data, stamp, record):
                        break
                for _ in pieces:  # the rest of the body (its last chunk): the connection stays usable
                    pass
        except wire.Stopped:
            record.error = "cancelled"
        except (wire.WireError, OSError) as exc:
            record.error = str(exc) or type(exc).__name__
            if conn is not None:
                conn.close()
            return True
        finally:
            record.end = time.perf_counter()
            if conn is not None:
                self._release(conn)
        return False

    def _event(self, data: bytes, now: float, record: RequestRecord) -> bool:
        """One SSE `data:` payload; True when the stream is over (done or failed)."""
        if data == b"[DONE]":
            return True
        try:
            chunk = json.loads(data)
        except ValueError:
            record.error = f"not JSON in the stream: {data[:80]!r}"
            return True
        if "error" in chunk:
            error = chunk["error"]
            record.error = str(error.get("message") if isinstance(error, dict) else error)
            return True
        usage = chunk.get("usage") or {}
        choices = chunk.get("choices") or []
        if usage.get("prompt_tokens") is not None:
            record.prompt_tokens = int(usage["prompt_tokens"])
        if not choices:  # the final usage chunk: trust its total over a count of chunks
            total = usage.get("completion_tokens")
            if isinstance(total, int) and total > record.tokens and not record.counted_by_server:
                record.tokens = total
            return False
        if usage.get("completion_tokens") is not None:
            record.counted_by_server = True  # cumulative completion tokens on every chunk
            record.arrive(now, int(usage["completion_tokens"]) - record.tokens)
        elif _chunk_text(choices[0]):
            record.arrive(now, 1)
        if record.first is not None and not self.generating.is_set():
            self.loop.call_soon_threadsafe(self._first_token)
        return False

    def _first_token(self) -> None:
        self.generating.set()
        self.wake.set()

    async def alive(self) -> bool:
        try:
            reply = await self.http.get("/health", timeout=3)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    # -- before a level

    async def connect(self, users: int) -> None:
        """Open one keep-alive connection per user first, as a client already talking to the server
        has: TTFT then measures the server, not this client's TCP handshakes."""
        with self.idle_lock:
            missing = users - len(self.idle)

        def open_one() -> None:
            try:
                conn = wire.Connection(self.host, self.port)
            except OSError:
                return  # the requests themselves will say what is wrong
            self._release(conn)

        await asyncio.gather(*(self.loop.run_in_executor(self.readers, open_one) for _ in range(max(0, missing))))


def _chunk_text(choice: dict[str, Any]) -> str:
    if choice.get("text"):
        return str(choice["text"])
    delta = choice.get("delta") or {}
    return str(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or "")


def _http_error(status: int, text: str) -> str:
    message = text.strip()
    try:
        body = json.loads(text)
        if isinstance(body, dict):
            error = body.get("error", body.get("detail", body.get("message")))
            message = str(error.get("message") if isinstance(error, dict) else error or message)
    except ValueError:
        pass
    if status == 404:
        return f"HTTP 404: {message[:300]} (an unknown model? see --model)"
    if status == 401:
        return "HTTP 401: the server refused the API key; set VLLM_API_KEY to the key it was started with"
    return f"HTTP {status}: {message[:300]}"

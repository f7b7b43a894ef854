"""An OpenAI-compatible server whose timing is known: the truth the benchmark is checked against.

Every streaming completion sends its first token `ttft` seconds after the request arrived, then
one token every 1/`rate` seconds, on an absolute schedule (no drift), as vLLM's SSE chunks
(`data: {...}`, continuous usage stats when asked, a final usage chunk, `data: [DONE]`).
/metrics reports `vllm:kv_cache_usage_perc` as running requests / --kv-slots, so the peak KV
usage a benchmark sees is known too. Stdlib only (asyncio); run it as a process:

    python -m tests.support.timed_server --ttft 0.2 --rate 40 [--port 0] [--api-key K]
        [--tokens-per-chunk N] [--kv-slots N] [--max-running N] [--exit-after-requests N]

It prints `listening PORT` once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

MODEL = "timed-model"


class TimedServer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.ttft, self.rate, self.kv_slots = args.ttft, args.rate, args.kv_slots
        self.api_key = args.api_key
        self.tokens_per_chunk = args.tokens_per_chunk
        self.exit_after = args.exit_after_requests
        self.running = 0
        self.started = 0
        # like vLLM's --max-num-seqs: requests past it wait for a slot (their TTFT grows)
        self.slots = asyncio.Semaphore(args.max_running) if args.max_running else None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """HTTP/1.1 with keep-alive, as uvicorn serves vLLM: one request after another per connection."""
        try:
            while await self.one(reader, writer):
                pass
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        head = await reader.readuntil(b"\r\n\r\n")
        arrived = asyncio.get_running_loop().time()
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0") or 0))
        if path.startswith("/v1/") and self.api_key and headers.get("authorization") != f"Bearer {self.api_key}":
            await self.reply(writer, 401, {"error": "Unauthorized"})
        elif method == "GET" and path == "/health":
            await self.reply(writer, 200, b"")
        elif method == "GET" and path == "/version":
            await self.reply(writer, 200, {"version": "timed-1.0"})
        elif method == "GET" and path == "/v1/models":
            await self.reply(writer, 200, {"object": "list", "data": [{"id": MODEL, "max_model_len": 4096}]})
        elif method == "GET" and path == "/metrics":
            text = (
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                f'vllm:kv_cache_usage_perc{{engine="0",model_name="{MODEL}"}} {self.running / self.kv_slots}\n'
                "# TYPE vllm:num_requests_running gauge\n"
                f'vllm:num_requests_running{{engine="0",model_name="{MODEL}"}} {self.running}\n'
            )
            await self.reply(writer, 200, text.encode(), "text/plain; version=0.0.4")
        elif method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            await self.complete(writer, path, json.loads(body or b"{}"), arrived)
        else:
            await self.reply(writer, 404, {"detail": "Not Found"})
        return headers.get("connection", "").lower() != "close"

    async def reply(
        self, writer: asyncio.StreamWriter, code: int, body: object, ctype: str = "application/json"
    ) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        writer.write(
            f"HTTP/1.1 {code} X\r\ncontent-type: {ctype}\r\ncontent-length: {len(data)}\r\n\r\n".encode() + data
        )
        await writer.drain()

    @staticmethod
    def send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
        writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    async def complete(self, writer: asyncio.StreamWriter, path: str, request: dict, arrived: float) -> None:
        if request.get("model") != MODEL:
            await self.reply(writer, 404, {"error": {"message": f"The model `{request.get('model')}` does not exist."}})
            return
        chat = path.endswith("chat/completions")
        prompt = request["messages"][-1]["content"] if chat else request["prompt"]
        prompt_tokens = len(str(prompt).split())
        max_tokens = int(request.get("max_tokens") or 16)
        options = request.get("stream_options") or {}
        usage_on, continuous = bool(options.get("include_usage")), bool(options.get("continuous_usage_stats"))
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        shape = (chat, prompt_tokens, max_tokens, usage_on, continuous)
        if self.slots is None:
            await self.stream(writer, arrived, *shape)
            return
        async with self.slots:  # the schedule starts when the request gets its slot
            await self.stream(writer, asyncio.get_running_loop().time(), *shape)

    async def stream(
        self,
        writer: asyncio.StreamWriter,
        arrived: float,
        chat: bool,
        prompt_tokens: int,
        max_tokens: int,
        usage_on: bool,
        continuous: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        created = int(time.time())
        self.running += 1
        self.started += 1
        try:
            sent = 0
            while sent < max_tokens:
                if self.exit_after and self.started > self.exit_after and sent >= max_tokens // 2:
                    os._exit(1)  # a server that dies mid-run, mid-stream
                n = min(self.tokens_per_chunk, max_tokens - sent)
                # the chunk goes out when its last token is due
                due = arrived + self.ttft + (sent + n - 1) / self.rate
                await asyncio.sleep(max(0.0, due - loop.time()))
                sent += n
                text = " tok" * n
                choice: dict = (
                    {"index": 0, "delta": {"content": text}, "finish_reason": None}
                    if chat
                    else {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}
                )
                if sent == max_tokens:
                    choice["finish_reason"] = "length"
                chunk: dict = {
                    "id": "cmpl-timed",
                    "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": created,
                    "model": MODEL,
                    "choices": [choice],
                }
                if usage_on and continuous:
                    chunk["usage"] = {
                        "prompt_tokens": prompt_tokens,
                        "completion_tokens": sent,
                        "total_tokens": prompt_tokens + sent,
                    }
                self.send_chunk(writer, f"data: {json.dumps(chunk)}\n\n".encode())
                await writer.drain()
            if usage_on:
                final = {"id": "cmpl-timed", "object": "text_completion", "created": created, "model": MODEL}
                final |= {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": sent}}
                self.send_chunk(writer, f"data: {json.dumps(final)}\n\n".encode())
            self.send_chunk(writer, b"data: [DONE]\n\n")
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        finally:
            self.running -= 1


@contextlib.contextmanager
def running(**options: object) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """Start the server as a process (options as its flags: ttft=0.5 → --ttft 0.5); yield its
    URL and process; kill it afterwards."""
    argv = [sys.executable, "-m", "tests.support.timed_server"]
    for name, value in options.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    server = subprocess.Popen(argv, cwd=Path(__file__).resolve().parents[2], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # blocks until it listens (or dies: then "")
        assert line.startswith("listening "), f"the timed server did not start: {line!r}"
        yield f"http://127.0.0.1:{int(line.split()[1])}", server
    finally:
        server.kill()
        server.wait()


async def main(args: argparse.Namespace) -> None:
    server = TimedServer(args)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=256)
    print(f"listening {listener.sockets[0].getsockname()[1]}", flush=True)
    async with listener:
        await listener.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ttft", type=float, default=0.2, help="seconds to the first token")
    parser.add_argument("--rate", type=float, default=40.0, help="tokens per second per request after it")
    parser.add_argument("--tokens-per-chunk", type=int, default=1, help="tokens each SSE chunk carries")
    parser.add_argument("--kv-slots", type=int, default=16, help="requests that fill the KV cache (for /metrics)")
    parser.add_argument("--max-running", type=int, default=0, help="requests served at once (0: all)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--exit-after-requests", type=int, default=0, help="die halfway through the stream of the request after N"
    )
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args()))

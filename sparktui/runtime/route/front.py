"""The route's front: the OpenAI API on one port, each request forwarded to its model's server.

GET /v1/models lists every model of the route (up or not); POST /v1/completions,
/v1/chat/completions and /v1/embeddings are forwarded by their "model" (started first when it is
down: swapper.py), streams byte for byte as they come. Errors have vLLM's own shape (vLLM 0.32,
entrypoints/serve/engine/protocol.py ErrorResponse, serving.py _check_model's 404).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from sparktui.atomic import atomic_write_text
from sparktui.core.profiles import load_profile
from sparktui.core.route import RouteSettings
from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.records.endpoint import base_url
from sparktui.runtime.route import servers
from sparktui.runtime.route.http import Request, Response, json_response, serve_connection
from sparktui.runtime.route.record import leftovers, route_record_path
from sparktui.runtime.route.swapper import RouteError, Slot, Swapper

API_KEY_ENV = "SPARKTUI_ROUTE_API_KEY"  # the front's key; the servers get it as VLLM_API_KEY
FORWARDED = ("/v1/completions", "/v1/chat/completions", "/v1/embeddings")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}
LOOPBACK = ("127.0.0.1", "localhost", "::1")
RECORD_EVERY_S = 0.5  # the record is for people (the panel): not rewritten for every request


def error_body(status: int, kind: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


class Front:
    def __init__(self, settings: RouteSettings, swapper: Swapper, api_key: str | None) -> None:
        self.settings, self.swapper, self.api_key = settings, swapper, api_key
        self.client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=10.0, read=None, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def handle(self, req: Request) -> Response:
        if req.path == "/health" and req.method == "GET":
            return Response(200)
        if req.path.startswith("/v1/") and not self._authorised(req):
            return json_response(401, {"error": "Unauthorized"})  # vLLM's AuthenticationMiddleware
        if req.path == "/v1/models" and req.method == "GET":
            return json_response(200, self.models())
        if req.path in FORWARDED and req.method == "POST":
            return await self.forward(req)
        return json_response(404, {"detail": "Not Found"})  # FastAPI's, as vLLM answers

    def _authorised(self, req: Request) -> bool:
        if not self.api_key:
            return True
        given = req.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.api_key}".encode())

    def models(self) -> dict[str, Any]:
        cards: list[dict[str, Any]] = [
            {"id": s.model.name, "object": "model", "created": int(time.time()), "owned_by": "vllm",
             "root": s.serve.model, "parent": None, "max_model_len": s.serve.max_model_len, "permission": []}
            for s in self.swapper.slots.values()
        ]  # fmt: skip
        return {"object": "list", "data": cards}

    async def forward(self, req: Request) -> Response:
        try:
            name = json.loads(req.body or b"{}").get("model")
        except (ValueError, AttributeError):
            return json_response(400, error_body(400, "BadRequestError", "the request body is not a JSON object"))
        if name not in self.swapper.slots:
            names = ", ".join(self.swapper.slots)
            message = f"The model `{name}` does not exist. Valid aliases: {names}."
            return json_response(404, error_body(404, "NotFoundError", message, "model"))
        for attempt in (1, 2):
            try:
                slot = await self.swapper.acquire(str(name))
            except RouteError as exc:
                extra = [("retry-after", str(exc.retry_after))] if exc.retry_after else []
                return json_response(exc.status, error_body(exc.status, exc.kind, exc.message), extra)
            try:
                upstream = await self._send(slot, req)
                break
            except httpx.HTTPError as exc:
                self.swapper.release(slot)
                # a server that ended outside the route (a crash, a guard trip, `sparktui stop`): once
                # it is known gone, the request starts it again
                if attempt == 1 and isinstance(exc, httpx.ConnectError) and await self.swapper.forget_if_gone(slot):
                    continue
                message = f"{slot.model.name}'s server on port {slot.port} did not answer: {exc}"
                return json_response(502, error_body(502, "BadGatewayError", message))
        headers = [(k, v) for k, v in upstream.headers.items() if k.lower() not in HOP_BY_HOP]

        async def done() -> None:
            await upstream.aclose()
            self.swapper.release(slot)

        if upstream.headers.get("content-type", "").startswith("text/event-stream"):
            return Response(upstream.status_code, headers, stream=self._relay(upstream), done=done)
        try:
            body = await upstream.aread()
        except httpx.HTTPError as exc:
            await done()
            return json_response(502, error_body(502, "BadGatewayError", f"{slot.model.name}: {exc}"))
        return Response(upstream.status_code, headers, body, done=done)

    async def _send(self, slot: Slot, req: Request) -> httpx.Response:
        key = slot.serve.api_key or self.api_key
        headers = {k: v for k, v in req.headers.items() if k in ("content-type", "accept", "user-agent")}
        if key:
            headers["authorization"] = f"Bearer {key}"
        url = base_url(slot.serve.host, slot.port) + req.path
        return await self.client.send(self.client.build_request("POST", url, headers=headers, content=req.body),
                                      stream=True)  # fmt: skip

    @staticmethod
    async def _relay(upstream: httpx.Response) -> AsyncIterator[bytes]:
        async for chunk in upstream.aiter_raw():
            yield chunk


# ---------------------------------------------------------------- the route's process


def load_slots(settings: RouteSettings) -> list[Slot]:
    """Each model's profile, loaded once; a model name other than the profile's own served name is
    passed to its server as --served-model-name, so it answers to the name clients send."""
    slots = []
    for m in settings.models:
        profile = load_profile(m.profile)
        if profile.cluster is not None:
            raise UserError(f"{m.profile}: a cluster profile ([cluster]) cannot be routed yet; serve it on its own")
        serve = profile.serve
        if (serve.served_model_name or serve.model) != m.name:
            serve = serve.replace(served_model_name=m.name)
        if serve.port == settings.port:
            raise UserError(f"{m.profile}: serves on port {serve.port}, the route's own; give the profile another port")
        slots.append(Slot(m, profile, serve))
    return slots


class Route:
    """The front, its swapper and its record (state_dir/route/PORT.json, read by the panel)."""

    def __init__(self, settings: RouteSettings, slots: list[Slot], api_key: str | None) -> None:
        self.settings = settings
        self.swapper = Swapper(settings, slots, on_change=self._changed)
        self.front = Front(settings, self.swapper, api_key)
        self.record_path = route_record_path(settings.port)
        self.stopping = asyncio.Event()
        self._dirty = asyncio.Event()
        self.started_at = time.time()
        me = proc.read_stat(os.getpid())
        self.start_time = me.start_time if me else 0  # with the pid: which process the record is of
        self.status = "starting"

    def _changed(self) -> None:
        self._dirty.set()

    def record(self) -> dict[str, Any]:
        return {"pid": os.getpid(), "start_time": self.start_time, "listen": f"{self.settings.host}:{self.settings.port}", "status": self.status,
                "started_at": self.started_at, "updated_at": time.time(), **self.swapper.snapshot()}  # fmt: skip

    def write_record(self) -> None:
        atomic_write_text(self.record_path, json.dumps(self.record(), indent=1), private=True)

    async def _keep_record(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            await asyncio.to_thread(self.write_record)
            await asyncio.sleep(RECORD_EVERY_S)  # a burst of changes is one write

    async def _stop_leftovers(self) -> None:
        """The servers a route on this port started and left behind when it died unstopped: stopped
        by their launch ids (a server someone started there since is not touched)."""
        left = leftovers(self.settings.port)
        for name, port, _ in left:
            print(f"sparktui: stopping {name} on port {port}, left running by a route that ended unstopped",
                  file=sys.stderr, flush=True)  # fmt: skip
        await asyncio.gather(*(asyncio.to_thread(servers.stop, port, launch_id) for _, port, launch_id in left))

    async def run(self, on_listening: Any = None) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, self.stopping.set)

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await serve_connection(reader, writer, self.front.handle)

        try:
            server = await asyncio.start_server(connection, self.settings.host, self.settings.port, backlog=256)
        except OSError as exc:
            raise UserError(
                f"--listen {self.settings.host}:{self.settings.port}: cannot listen there: {exc.strerror}"
            ) from None
        await self._stop_leftovers()
        self.status = "running"
        self.write_record()
        if on_listening is not None:
            on_listening()
        tasks = [loop.create_task(t) for t in (self._keep_record(), self.swapper.ttl_loop(), self.swapper.preload())]
        try:
            await self.stopping.wait()
        finally:
            self.status = "stopping"
            server.close()
            await self.swapper.stop_all()
            for t in tasks:
                t.cancel()
            await self.front.client.aclose()
            self.status = "stopped"
            self.write_record()
        return 0


def front_api_key(host: str, force: bool) -> str | None:
    """The front's key from the environment (never argv); the servers inherit it as VLLM_API_KEY.
    A front reachable from the network needs one, as `serve` does."""
    key = os.environ.get(API_KEY_ENV) or None
    if key:
        os.environ["VLLM_API_KEY"] = key
    else:
        os.environ.pop("VLLM_API_KEY", None)  # servers open on loopback, as the front
        if host not in LOOPBACK and not force:
            raise UserError(
                f"--listen {host}: the route would be reachable from the network without an API key; set "
                f"{API_KEY_ENV} in the environment, listen on 127.0.0.1, or pass --force if you mean it"
            )
    return key


def run_route(settings: RouteSettings, *, force: bool = False) -> int:
    key = front_api_key(settings.host, force)
    slots = load_slots(settings)
    route = Route(settings, slots, key)
    return asyncio.run(route.run(lambda: print(f"route on http://{settings.host}:{settings.port}/v1 "
                                                f"serving {', '.join(s.model.name for s in slots)}", flush=True)))  # fmt: skip

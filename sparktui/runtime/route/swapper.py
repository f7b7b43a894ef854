"""Which of the route's models are up, and bringing one up: make room (core.route.plan_room over
core.pool's reservations), stop the servers in the way, wait until their memory has come back,
start the one asked for, and let the requests that waited go.

One swap at a time (a lock, first come first served); requests wait in a bounded queue with a
timeout; a server with requests in flight is drained before it stops. Everything here runs on
one asyncio loop; the blocking supervisor calls run in threads.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparktui.core.config import ServeConfig
from sparktui.core.pool import Reservation
from sparktui.core.profiles import Profile
from sparktui.core.route import RouteModel, RouteSettings, Running, plan_room
from sparktui.errors import UserError
from sparktui.runtime.records.launch_id import new_launch_id
from sparktui.runtime.records.protocol import StateRecord
from sparktui.runtime.route import servers

HISTORY = 50
RETRY_AFTER_S = 5


class RouteError(Exception):
    """A request the route cannot serve now: the HTTP status, vLLM's error type, and Retry-After."""

    def __init__(self, status: int, kind: str, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.retry_after = status, kind, message, retry_after


@dataclass
class Slot:
    model: RouteModel
    profile: Profile
    serve: ServeConfig
    status: str = "down"  # down | starting | up | draining | stopping
    in_flight: int = 0
    queued: int = 0
    last_used: float = 0.0  # monotonic
    last_used_at: float | None = None  # wall clock, for the panel
    launch_id: str | None = None  # of the server the route started, while it may live
    started: servers.Started | None = None
    error: str | None = None  # the last failed start
    reservation: Reservation | None = None  # what it reserves of the pool (core.pool), once started
    task: asyncio.Task[None] | None = None  # the bring-up in progress
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def port(self) -> int:
        return self.serve.port


@dataclass
class Swap:
    """One bring-up: what stopped, how long each step took (the panel's swap history)."""

    at: float
    model: str
    stopped: list[str] = field(default_factory=list)
    reason: str = ""
    drain_s: float = 0.0
    stop_s: float = 0.0
    memory_s: float = 0.0
    start_s: float = 0.0
    total_s: float = 0.0
    ok: bool = False
    error: str | None = None
    step: str = "plan"  # while it runs: plan | drain | stop | memory | start; then done

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Swapper:
    def __init__(
        self,
        settings: RouteSettings,
        slots: list[Slot],
        *,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.slots = {s.model.name: s for s in slots}
        self.on_change = on_change
        self.lock = asyncio.Lock()  # one swap at a time
        self.waiting = 0
        self.history: collections.deque[Swap] = collections.deque(maxlen=HISTORY)
        self.closing = threading.Event()  # SIGTERM: starts in threads give up
        self.served = 0
        self.current: Swap | None = None  # the swap under way, for the panel
        for s in slots:
            s.idle.set()

    # -- requests

    async def acquire(self, name: str) -> Slot:
        """The slot of `name`, up, with this request counted in flight (release() it)."""
        slot = self.slots[name]
        if self._take(slot):
            return slot
        if self.waiting >= self.settings.queue:
            raise RouteError(503, "ServiceUnavailableError",
                             f"the route's queue is full ({self.settings.queue} requests wait for a model to come "
                             "up); retry later", RETRY_AFTER_S)  # fmt: skip
        self.waiting += 1
        slot.queued += 1
        self.on_change()
        deadline = time.monotonic() + self.settings.queue_timeout_s
        try:
            while not self._take(slot):
                if self.closing.is_set():
                    raise RouteError(503, "ServiceUnavailableError", "the route is shutting down")
                if slot.task is None or slot.task.done():
                    slot.task = asyncio.get_running_loop().create_task(self._bring_up(slot))
                left = deadline - time.monotonic()
                try:
                    await asyncio.wait_for(asyncio.shield(slot.task), max(0.0, left))
                except TimeoutError:
                    raise RouteError(503, "ServiceUnavailableError",
                                     f"{name} was not up within the route's queue timeout "
                                     f"({self.settings.queue_timeout_s:g} s); retry later", RETRY_AFTER_S) from None  # fmt: skip
                except UserError as exc:
                    raise RouteError(503, "ServiceUnavailableError", f"{name} could not be started: {exc}") from None
        finally:
            self.waiting -= 1
            slot.queued -= 1
            self.on_change()
        return slot

    def _take(self, slot: Slot) -> bool:
        if slot.status != "up":
            return False
        slot.in_flight += 1
        slot.idle.clear()
        self._touch(slot)
        return True

    def release(self, slot: Slot) -> None:
        slot.in_flight -= 1
        self.served += 1
        self._touch(slot)
        if slot.in_flight == 0:
            slot.idle.set()
        self.on_change()

    @staticmethod
    def _touch(slot: Slot) -> None:
        slot.last_used, slot.last_used_at = time.monotonic(), time.time()

    # -- bringing a model up

    async def _bring_up(self, slot: Slot) -> None:
        async with self.lock:
            if slot.status == "up" or self.closing.is_set():
                return
            swap = self.current = Swap(at=time.time(), model=slot.model.name)
            began = time.monotonic()
            try:
                await self._make_room(slot, swap)
                await self._start(slot, swap)
                swap.ok = True
            except UserError as exc:
                swap.error = slot.error = str(exc)
                raise
            finally:
                swap.total_s, swap.step, self.current = time.monotonic() - began, "done", None
                self.history.append(swap)
                self.on_change()

    async def _make_room(self, slot: Slot, swap: Swap) -> None:
        need, pool_size = await asyncio.to_thread(servers.need, slot.profile, slot.serve)
        ours = {s.launch_id for s in self.slots.values() if s.launch_id}
        others = await asyncio.to_thread(servers.others, {i for i in ours if i}, slot.profile)
        running = [
            Running(s.model, self._reservation(s), s.last_used, busy=s.in_flight > 0)
            for s in self.slots.values()
            if s is not slot and s.status in ("up", "starting", "draining")
        ]
        plan = plan_room(slot.model, need, running, others, pool_size, self.settings.evict)
        swap.reason = plan.reason
        if not plan.fits:
            raise UserError(f"it does not fit: {plan.reason}")
        victims = [self.slots[n] for n in plan.evict]
        if not victims:
            return
        swap.stopped = [v.model.name for v in victims]
        t0 = time.monotonic()
        self._step(swap, "drain")
        for v in victims:
            v.status = "draining"  # new requests for it wait for its own bring-up
        self.on_change()
        for v in victims:  # requests in flight finish first, within the queue timeout
            try:
                await asyncio.wait_for(v.idle.wait(), self.settings.queue_timeout_s)
            except TimeoutError:
                pass
        t1 = time.monotonic()
        swap.drain_s = t1 - t0
        started = [v.started for v in victims]
        self._step(swap, "stop")
        finals = await asyncio.gather(*(self._stop(v) for v in victims))
        t2 = time.monotonic()
        swap.stop_s = t2 - t1
        self._step(swap, "memory")
        try:
            for s, final in zip(started, finals, strict=False):  # never start into memory a stopped tree holds
                leak = await asyncio.to_thread(servers.memory_back, s, pool_size, final)
                if leak is not None:
                    raise UserError(f"{leak}; the route starts nothing until it is freed")
        finally:
            swap.memory_s = time.monotonic() - t2

    def _step(self, swap: Swap, step: str) -> None:
        swap.step = step
        self.on_change()

    def _reservation(self, slot: Slot) -> Reservation:
        if slot.reservation is not None:
            return slot.reservation
        return Reservation(slot.port, slot.profile.name, 0, "not started yet")

    async def _start(self, slot: Slot, swap: Swap) -> None:
        slot.reservation, _ = await asyncio.to_thread(servers.need, slot.profile, slot.serve)
        slot.status, slot.error = "starting", None
        swap.step = "start"
        slot.launch_id = new_launch_id()
        self.on_change()
        t0 = time.monotonic()
        try:
            slot.started = await asyncio.to_thread(
                servers.start, slot.profile, slot.serve, slot.launch_id, self.settings.start_timeout_s, self.closing
            )
        except BaseException:
            slot.status = "down"
            await asyncio.to_thread(servers.stop, slot.port, slot.launch_id)  # whatever got started
            slot.launch_id = None
            raise
        swap.start_s = time.monotonic() - t0
        slot.status = "up"
        self._touch(slot)

    async def _stop(self, slot: Slot) -> StateRecord | None:
        """Stop the slot's server; its end record (with the leak gate's verdict), if it has one."""
        slot.status = "stopping"
        self.on_change()
        final = None
        if slot.launch_id is not None:
            final = await asyncio.to_thread(servers.stop, slot.port, slot.launch_id)
        slot.status, slot.launch_id, slot.started, slot.reservation = "down", None, None, None
        self.on_change()
        return final

    async def forget_if_gone(self, slot: Slot) -> bool:
        """True when the route's server of `slot` has ended (its record says so): the slot is down
        again, and the next request starts it."""
        launch_id = slot.launch_id
        if slot.status != "up" or launch_id is None:
            return slot.status == "down"
        if await asyncio.to_thread(servers.running, slot.port, launch_id):
            return False
        async with self.lock:
            if slot.launch_id == launch_id and slot.status == "up":
                slot.status, slot.launch_id, slot.started, slot.reservation = "down", None, None, None
                gone = Swap(at=time.time(), model="", stopped=[slot.model.name], reason="it ended outside the route")
                gone.ok, gone.step = True, "done"
                self.history.append(gone)
                self.on_change()
        return True

    # -- TTL, preload, shutdown

    async def preload(self) -> None:
        for slot in self.slots.values():
            if slot.model.preload:
                slot.task = asyncio.get_running_loop().create_task(self._bring_up(slot))
                try:
                    await asyncio.shield(slot.task)
                except UserError:
                    pass  # recorded in the history and on the slot; a request retries

    async def stop_idle(self) -> list[str]:
        """Stop the models idle for longer than their TTL; their names."""
        now = time.monotonic()
        due = [s for s in self.slots.values()
               if s.model.ttl_s > 0 and s.status == "up" and s.in_flight == 0 and now - s.last_used >= s.model.ttl_s]  # fmt: skip
        stopped = []
        for slot in due:
            async with self.lock:
                if slot.status != "up" or slot.in_flight or time.monotonic() - slot.last_used < slot.model.ttl_s:
                    continue
                began = time.monotonic()
                await self._stop(slot)
                swap = Swap(
                    at=time.time(),
                    model="",
                    stopped=[slot.model.name],
                    reason=f"idle for {slot.model.ttl_s:g} s (ttl-s)",
                )
                swap.stop_s = swap.total_s = time.monotonic() - began
                swap.ok = True
                self.history.append(swap)
                stopped.append(slot.model.name)
        if stopped:
            self.on_change()
        return stopped

    async def ttl_loop(self) -> None:
        ttls = [s.model.ttl_s for s in self.slots.values() if s.model.ttl_s > 0]
        if not ttls:
            return
        every = max(0.1, min(1.0, min(ttls) / 4))
        while not self.closing.is_set():
            await asyncio.sleep(every)
            await self.stop_idle()

    async def stop_all(self) -> None:
        """Every server the route started, whole trees (SIGTERM, the route ending)."""
        self.closing.set()
        for slot in self.slots.values():
            if slot.task is not None and not slot.task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(slot.task), self.settings.start_timeout_s)
                except (UserError, TimeoutError, asyncio.CancelledError):
                    pass
        await asyncio.gather(*(self._stop(s) for s in self.slots.values() if s.launch_id is not None))

    def snapshot(self) -> dict[str, Any]:
        return {
            "models": [
                {
                    "name": s.model.name,
                    "profile": s.profile.name,
                    "port": s.port,
                    "launch_id": s.launch_id,  # a route that died unstopped: the next one stops it by this
                    "status": s.status,
                    "in_flight": s.in_flight,
                    "queued": s.queued,
                    "last_used_at": s.last_used_at,
                    "keep": s.model.keep,
                    "ttl_s": s.model.ttl_s,
                    "group": s.model.group,
                    "start_s": s.started.start_s if s.started else None,
                    "supervisor_pid": s.started.supervisor_pid if s.started else None,
                    "error": s.error,
                }
                for s in self.slots.values()
            ],
            "queued": self.waiting,
            "served": self.served,
            "swapping": self.current.to_dict() if self.current else None,
            "history": [h.to_dict() for h in self.history],
        }

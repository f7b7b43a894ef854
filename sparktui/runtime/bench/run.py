"""`run_bench`: resolve what to run (the levels, the depths or the sweep), check the server, warm it
up, run the levels, and return the report; Ctrl-C or `cancel` ends it with what was measured."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable

import httpx

from sparktui.errors import UserError
from sparktui.runtime.bench.client import Cancelled, ServerGone, StreamClient
from sparktui.runtime.bench.depth import depth_level
from sparktui.runtime.bench.levels import LevelAborted, LevelRunner
from sparktui.runtime.bench.limits import validate
from sparktui.runtime.bench.results import (
    BenchReport,
    BenchServer,
    BenchSettings,
    LevelResult,
    ProgressFn,
    SweepResult,
    SweepTargets,
)
from sparktui.runtime.bench.server_info import server_info
from sparktui.runtime.bench.sweep import sweep as sweep_levels
from sparktui.runtime.bench.target import Target
from sparktui.runtime.bench.watcher import Watcher


def run_bench(
    target: Target,
    settings: BenchSettings,
    *,
    sweep: SweepTargets | None = None,
    progress: ProgressFn | None = None,
    cancel: threading.Event | None = None,
    on_server: Callable[[BenchServer], None] | None = None,
) -> BenchReport:
    """Benchmark `target` (blocking; runs its own event loop, so call it from a thread in a UI).

    UserError when it cannot start (no server, refused, unknown model, bad settings). A run that
    ends early (the server stops, the guard trips, `cancel` is set) returns a report with
    partial=True and `error` saying why.
    """
    validate(settings, sweep)
    return asyncio.run(_run(target, settings, sweep, progress, cancel or threading.Event(), on_server))


async def _run(
    target: Target,
    settings: BenchSettings,
    sweep: SweepTargets | None,
    progress: ProgressFn | None,
    cancel: threading.Event,
    on_server: Callable[[BenchServer], None] | None,
) -> BenchReport:
    headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
    timeout = httpx.Timeout(settings.request_timeout_s, connect=5.0)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=256)
    started = time.time()
    # trust_env=False: loopback traffic never goes through a proxy from the environment
    async with httpx.AsyncClient(
        base_url=target.url, headers=headers, timeout=timeout, limits=limits, trust_env=False
    ) as http:
        client = StreamClient(target, settings, http, sweep.max_users if sweep else None)
        runner = LevelRunner(client, Watcher(client, cancel), progress, cancel)
        try:
            return await _measure(runner, sweep, on_server, started)
        finally:
            await asyncio.to_thread(client.close)


async def _measure(
    runner: LevelRunner,
    sweep: SweepTargets | None,
    on_server: Callable[[BenchServer], None] | None,
    started: float,
) -> BenchReport:
    client, settings = runner.client, runner.settings
    server = await server_info(client)
    if server.guard_armed is False:
        raise UserError(
            f"the memory guard of the server on port {client.target.port} is disarmed; a benchmark pushes memory "
            f"hard, so arm it first: `sparktui set-guard --port {client.target.port} --arm` (F9 in the panel)"
        )
    if on_server is not None:
        on_server(server)
    await runner.watcher.probe_power()
    try:
        await client.warm_up()
    except ServerGone as exc:
        raise UserError(str(exc)) from None
    runs: list[LevelResult] = []
    sweep_result: SweepResult | None = None
    error: str | None = None
    # Ctrl-C (in a command's main thread) cancels like the panel's key: what was measured stays
    loop = asyncio.get_running_loop()
    on_interrupt = threading.current_thread() is threading.main_thread()
    if on_interrupt:
        loop.add_signal_handler(signal.SIGINT, runner.cancel.set)
    try:
        if settings.depths:
            for depth in settings.depths:
                runs.append(await depth_level(runner, depth))
        elif sweep is None:
            for users in settings.users:
                runs.append(await runner.level(users))
        else:
            sweep_result = await sweep_levels(runner, sweep, runs)
    except LevelAborted as aborted:
        if aborted.result.requests:
            runs.append(aborted.result)
        error = "cancelled" if isinstance(aborted.cause, Cancelled) else str(aborted.cause)
    finally:
        if on_interrupt:
            loop.remove_signal_handler(signal.SIGINT)
    return BenchReport(
        server=server,
        settings=settings,
        runs=runs,
        sweep=sweep_result,
        partial=error is not None,
        error=error,
        started_at=started,
        finished_at=time.time(),
    )

"""The tests' wait for an app with nothing pending, in place of Textual's CPU-idle guess.

Textual's `Pilot.pause()` and `Pilot.press()` wait until the process used little CPU for a 20 ms
window (`textual._wait.wait_for_idle`): a guess that costs 20–40 ms a call when all is done, and
that a busy neighbour can end early or stretch to its 1 s cap. `until_quiet` instead looks at
what the app still has to do and returns when nothing is left:
  - no callback ready to run on the event loop (a posted key, a thread's `call_from_thread`);
  - every message pump (app, screens, widgets) waiting on an empty queue, with no message held
    back and no `call_next` callback left, so none is midway through a handler or a mount;
  - no worker unfinished, no animation running or scheduled, no batch update open;
  - the current screen with no layout, repaint, scroll or recompose due and no after-refresh
    callback left (a due update is done at once, as `Pilot.pause()` does at its end).
Timers and the app's own threads (polls) are not waited for: a test waits for what they bring
with `until(...)`, as it did before.

`install()` puts it under Textual's `wait_for_idle` (so `Pilot.press`, which waits twice per key,
and the snapshot plugin's pilot use it) and under `Pilot.pause()`/`press()`, whose
`_wait_for_screen` round trip to every widget it also covers.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

# Past this, the app is taken to be stuck, not busy: the test fails saying what never finished.
STUCK_S = 60.0

# A one-shot timer this short is a debounce (Textual's resize waits 1/120 s, lazy mounts 0.02 s,
# delay_update 0.05 s): work already on its way, waited for. Longer ones (a backstop, a notice's
# timeout) are the app's own clock, which a test waits on with `until`.
SHORT_TIMER_S = 0.1

# Workers that follow something for as long as it lasts (the log of a running server): what they
# bring arrives as it comes, like the polls' threads, and a test waits for it with `until`.
STANDING_WORKERS = {"tail-log"}


def _pumps(app: Any) -> list[Any]:
    pumps = [app, *app.screen_stack, *list(app._registry)]
    return list({id(p): p for p in pumps}.values())


def _pump_pending(pump: Any) -> str | None:
    if pump._closed:
        return None
    if pump._next_callbacks:
        return "call_next callbacks"
    if pump._pending_message is not None:
        return "a held-back message"
    queue = pump.__dict__.get("_message_queue")
    if queue is not None and not queue.empty():
        return f"{queue.qsize()} queued message(s)"
    task = pump._task
    # Idle means: its loop is parked in queue.get() (textual._queue: on its ready_event).
    # Anything else is a handler (or the compose/mount) still running, awaiting something.
    parked = queue is not None and any(not waiter.done() for waiter in queue.ready_event._waiters)
    if task is not None and not task.done() and not parked:
        return "a handler running"
    return None


def pending(app: Any, workers: bool = True) -> str | None:
    """What the app still has to do right now, or None when nothing is left (its workers' work
    counted unless `workers` is False)."""
    if _loop_ready():
        return "callbacks ready on the event loop"
    if app._batch_count:
        return "a batch update open"
    if workers and (worker := _running_worker(app)) is not None:
        return f"worker {worker!r}"
    for pump in _pumps(app):
        why = _pump_pending(pump)
        if why is not None:
            return f"{pump!r}: {why}"
    animator = app.animator
    if animator._animations or animator._scheduled:
        return "animations"
    for pump in _pumps(app):
        for timer in list(pump._timers):
            if _timer_mid_callback(timer):
                return f"timer {timer!r} in its callback"
            if getattr(timer, "_quiet_short", False) and _timer_due(timer):
                return f"a short timer {timer!r}"
    return None


def _running_worker(app: Any) -> Any:
    for worker in app.workers:
        if not worker.is_finished and worker.name not in STANDING_WORKERS:
            return worker
    return None


def _timer_due(timer: Any) -> bool:
    task = getattr(timer, "_task", None)
    return task is not None and not task.done() and timer._active.is_set()


def _timer_mid_callback(timer: Any) -> bool:
    """A Textual timer runs its callback in its own task: one that awaits is work in flight."""
    task = getattr(timer, "_task", None)
    if task is None or task.done():
        return False
    awaiting = task.get_coro()  # _run_timer → _run → sleep, or → _tick while the callback runs
    while getattr(awaiting, "cr_code", None) is not None:
        if awaiting.cr_code.co_name == "_tick":
            return True
        awaiting = awaiting.cr_await
    return False


def _screen_due(app: Any) -> bool:
    try:
        screen = app.screen
    except Exception:
        return False
    return bool(
        screen._layout_required
        or screen._scroll_required
        or screen._repaint_required
        or screen._recompose_required
        or screen._dirty_widgets
        or screen._callbacks
    )


async def until_quiet(app: Any, workers: bool = True) -> None:
    """Return once the app has nothing pending (see the module's note); fail if it never gets there.
    With `workers` False a running worker does not count (a test waiting for a condition looks at
    it each time the rest is done, also while a worker hangs on purpose)."""
    deadline = time.monotonic() + STUCK_S
    calm = 0
    while True:
        if app._exit or app._closing or app._closed:
            return  # on its way out: what is left is the shutdown the test's `async with` awaits
        why = pending(app, workers)
        if why is None and _screen_due(app):
            app.screen._on_timer_update()  # as Pilot.pause() ends: the due update, now
            why = "the screen's update"
        if why is None:
            # Twice, a turn of the loop apart: a task's first step (a key the driver posts) is
            # ready only after the turn that made it.
            calm += 1
            if calm == 2:
                return
            await asyncio.sleep(0)
            continue
        calm = 0
        if time.monotonic() > deadline:
            raise AssertionError(f"the app never settled in {STUCK_S:g} s: still {why}")
        if _loop_ready():
            await asyncio.sleep(0)  # ready work runs at the next turn
            continue
        worker = _running_worker(app) if workers else None
        task = getattr(worker, "_task", None)
        if task is not None:
            # a worker (a thread at work): its task ends with it; the loop runs meanwhile
            await asyncio.wait([task], timeout=0.05)
        else:
            # a timer, a thread or a handler awaiting one: a look every few ms (a look costs
            # ~0.3 ms), not a spinning loop that would take the CPU from them
            await asyncio.sleep(0.002)


def _loop_ready() -> bool:
    return bool(getattr(asyncio.get_running_loop(), "_ready", None))


_installed = False


def install() -> None:
    """Use `until_quiet` wherever Textual's pilot (and the snapshot plugin through it) waits for idle."""
    global _installed
    if _installed:
        return
    _installed = True
    import textual.app
    import textual.pilot
    from textual._context import active_app

    textual_wait = textual.pilot.wait_for_idle

    async def wait_for_idle(min_sleep: float = 0.02, max_sleep: float = 1) -> None:
        try:
            app = active_app.get()
        except LookupError:
            await textual_wait(min_sleep, max_sleep)
            return
        await until_quiet(app)

    textual.app.wait_for_idle = wait_for_idle
    textual.pilot.wait_for_idle = wait_for_idle

    from textual.message_pump import MessagePump

    textual_set_timer = MessagePump.set_timer

    def set_timer(self: Any, delay: float, *args: Any, **kwargs: Any) -> Any:
        timer = textual_set_timer(self, delay, *args, **kwargs)
        timer._quiet_short = delay <= SHORT_TIMER_S
        return timer

    MessagePump.set_timer = set_timer

    Pilot = textual.pilot.Pilot
    textual_pause = Pilot.pause

    async def pause(self: Any, delay: float | None = None) -> None:
        if delay is not None:  # a test's own window of time: as Textual waits it
            await textual_pause(self, delay)
            return
        await until_quiet(self.app)
        self.app.screen._on_timer_update()

    async def press(self: Any, *keys: str) -> None:
        if keys:
            await self.app._press_keys(keys)
            await until_quiet(self.app)

    Pilot.pause = pause
    Pilot.press = press

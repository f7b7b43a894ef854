"""The memory pane: the unified-memory gauge, the GPU line, the vLLM tree, the guard, and the
routes (`sparktui route`) running on the machine.

It owns the memory poll (MemAvailable, the GPU and the routes every second, in one thread of its
own, never overlapping) and the guard keys. With a server running the guard is the supervisor's; with none it is the profile's guard
for the next launch (edited here, saved with the profile).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

from textual.message import Message
from textual.reactive import var
from textual.widget import Widget

from sparktui.errors import UserError
from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import GuardSettingsEdited, MemorySampled, Notice, ServerChanged, WorkerFailed
from sparktui.ui.panes.base import Pane, io_worker
from sparktui.ui.viewmodels import GpuView, GuardView
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.route import RouteBox

if TYPE_CHECKING:
    from sparktui.core.guard_lines import LineName
    from sparktui.core.profiles import Profile
    from sparktui.runtime.host.memory import MemorySample
    from sparktui.ui.serverviews import RouteView, ServerEntry, ServerStatus


def parse_guard_lines(text: str) -> dict[LineName, float]:
    """ "20 12 8" → the three lines in GiB, warn ≥ term ≥ kill ≥ 0; UserError says what was wrong."""
    parts = text.replace(",", " ").split()
    try:
        warn, term, kill = (float(p) for p in parts)
    except ValueError:
        raise UserError("expected three numbers in GiB: warn term kill, e.g. 20 12 8") from None
    if not warn >= term >= kill >= 0:
        raise UserError(f"expected warn ≥ term ≥ kill ≥ 0 GiB, got {warn:g} {term:g} {kill:g}")
    return {"warn_below_gib": warn, "term_below_gib": term, "kill_below_gib": kill}


class MemoryPane(Pane):
    NAME = "memory"
    TAB = "3 Memory"
    POLL_S = 1.0

    profile: var[Profile | None] = var(cast("Profile | None", None), init=False)
    server: var[ServerStatus | None] = var(cast("ServerStatus | None", None), init=False)
    sample: var[MemorySample | None] = var(cast("MemorySample | None", None), init=False)
    guard: var[GuardView] = var(GuardView(), init=False)  # frozen: one default is shared safely
    servers: var[tuple[ServerEntry, ...]] = var(cast("tuple[ServerEntry, ...]", ()), init=False)

    class Sampled(Message, bubble=False):  # the pane's own: the widgets above need not take it each second
        def __init__(
            self,
            sample: MemorySample | None,
            gpu: GpuView | None,
            error: str | None,
            routes: tuple[RouteView, ...] | None = (),  # None: not read this time
        ) -> None:
            super().__init__()
            self.sample, self.gpu, self.error, self.routes = sample, gpu, error, routes

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._stop = threading.Event()  # the pane is gone: the poll's thread ends
        self._pool: tuple[int, int | None] | None = None  # (MemTotal, pool bytes): the pool changes with neither
        self.gauge = MemoryGauge(id="gauge")  # mounted later when the pane starts hidden (Pane.MOUNTS_LATER)
        self.routes = RouteBox(id="routes")

    MOUNTS_LATER = True

    def widgets(self) -> list[Widget]:
        return [self.gauge, self.routes]

    def on_mount(self) -> None:
        # MemAvailable at once (the first fit uses it, and /proc/meminfo is cheap); the GPU and the
        # routes with the poll, after the first full screen (NVML starts in its worker).
        self.call_after_refresh(self._sample_once, False)

    def on_unmount(self) -> None:
        self._stop.set()

    def start_background(self) -> None:
        self.call_later(self.mounted)
        self._sample_once(True)
        # Then one thread for the pane's life, not a worker a tick: a worker is a task, a thread
        # and three state messages through the app each second, most of the panel's idle CPU.
        threading.Thread(target=self._poll_loop, name="sparktui-memory", daemon=True).start()

    def _poll_loop(self) -> None:
        """Memory, GPU and routes every POLL_S seconds until the pane goes (never overlapping)."""
        reported = False
        while not self._stop.wait(self.POLL_S):
            try:
                message = self.read(full=True)
            except Exception as exc:  # unexpected: said once, as a failed worker would be; the poll goes on
                if not reported:
                    reported = True
                    self.post_message(WorkerFailed("reading memory and the GPU", exc))
                continue
            try:
                self.post_message(message)
            except RuntimeError:  # the app's loop closed meanwhile
                return

    @io_worker("sample-memory", "reading memory and the GPU")
    def _sample_once(self, full: bool) -> None:
        self.post_message(self.read(full))

    def read(self, full: bool) -> Sampled:
        """A memory reading; with `full`, the GPU's and the routes' too. Blocking I/O: off the UI thread."""
        sample = gpu = None
        error = None
        routes: tuple[RouteView, ...] | None = None
        try:
            sample = self.backend.memory()
        except (Unavailable, OSError, ValueError) as exc:
            error = str(exc)
        if full:
            try:
                gpu = self.backend.gpu()
            except Unavailable as exc:
                gpu = GpuView(note=str(exc), present=False)
            try:
                routes = self.backend.routes()
            except (UserError, OSError):
                routes = ()  # no state dir to read: no route to show
        return self.Sampled(sample, gpu, error, routes)

    def on_memory_pane_sampled(self, message: Sampled) -> None:
        self.gauge.update_sample(message.sample, message.error, message.gpu)
        if message.routes is not None:
            self.routes.show(message.routes)
        if message.sample is not None:
            # To the app, which shares it: not up through every widget between, each second
            self.app.post_message(MemorySampled(message.sample))
            if self.servers and (self._pool is None or self._pool[0] != message.sample.mem_total):
                self._show_servers()

    def watch_servers(self) -> None:
        self._show_servers()

    def _show_servers(self) -> None:
        """What the running servers reserve of this machine's pool (core.pool, as preflight counts it)."""
        live = tuple(e for e in self.servers if e.live)
        sample = self.gauge.sample
        if live and sample is not None and (self._pool is None or self._pool[0] != sample.mem_total):
            try:
                self._pool = (sample.mem_total, self.backend.pool_bytes(sample))
            except (UserError, Unavailable, ValueError):
                self._pool = (sample.mem_total, None)
        self.gauge.update_servers(live, self._pool[1] if self._pool else None)

    def watch_guard(self, guard: GuardView) -> None:
        self.gauge.update_guard(guard)

    def watch_server(self, server: ServerStatus | None) -> None:
        if server is not None and server.live:
            self.gauge.update_tree(server.tree_bytes, server.tree_procs)
        else:
            self.gauge.update_tree(None, None)

    # -- the guard (keys and palette: sparktui.ui.actions) -------------------------------------------

    def action_toggle_guard(self) -> None:
        if self.server is not None and self.server.live:
            armed = self.guard.state != "armed"
            self._guard_action(self.server, armed, None)
        elif self.profile is not None:
            self._edit_profile_guard(armed=self.profile.guard.armed is False)
        else:
            self._edit_profile_guard()

    def _edit_profile_guard(self, *, armed: bool | None = None, lines: dict[LineName, float] | None = None) -> None:
        """Change the guard the profile launches with (Ctrl+S keeps it)."""
        if self.profile is None:
            self.app.notify("open or save a profile first: the guard's settings live in it", severity="warning")
            return
        try:
            settings = self.profile.guard.changed(armed=armed, lines=lines)  # checks the order of the lines
        except UserError as exc:
            self.app.notify(str(exc), severity="error")
            return
        self.post_message(GuardSettingsEdited(settings))
        self.app.notify("guard settings changed for the next launch (Ctrl+S saves them in the profile)")

    def action_guard_lines(self) -> None:
        from sparktui.ui.screens import PromptScreen  # a dialog: loaded when first opened

        current = " ".join(f"{v:g}" for v in self.guard.line_gib() if v is not None)
        self.app.push_screen(
            PromptScreen(
                "Guard lines (GiB): warn term kill",
                parse_guard_lines,
                value=current,
                placeholder="20 12 8",
                hint="The guard warns, then stops (SIGTERM), then kills the server when MemAvailable "
                "falls below each line.",
            ),
            self._guard_lines_chosen,
        )

    def _guard_lines_chosen(self, lines: object) -> None:
        if not isinstance(lines, dict):
            return
        if self.server is not None and self.server.live:
            self._guard_action(self.server, None, lines)  # moved live; the profile keeps its own
        else:
            self._edit_profile_guard(lines=lines)

    @io_worker("guard-action", "changing the guard")
    def _guard_action(self, server: ServerStatus, armed: bool | None, lines: dict[LineName, float] | None) -> None:
        try:
            status = self.backend.set_guard(server, armed=armed, lines=dict(lines) if lines else None)
        except (UserError, Unavailable, OSError) as exc:
            self.post_message(Notice(f"guard: {exc}", "error"))
            return
        self.post_message(ServerChanged(status))

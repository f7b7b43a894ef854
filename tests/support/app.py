"""Shared by the app tests: a backend with fixed sample data for the parts that read the live
machine (memory, GPU, host name), so screens are deterministic; everything else is real."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from sparktui.core.units import GiB
from sparktui.ui.backend import Backend
from sparktui.ui.widgets.editor import ConfigEditor
from sparktui.ui.widgets.gauge import GpuView
from tests.support.quiet import until_quiet

# A DGX Spark at rest: MemTotal ≈ 121.7 GiB (DESIGN.md), 2 GiB swap.
SPARK_IDLE = dict(
    mem_total=int(121.7 * GiB),
    mem_available=int(112.4 * GiB),
    mem_free=int(96.3 * GiB),
    page_cache=int(14.8 * GiB),
    swap_total=16 * GiB,
    swap_free=16 * GiB,
    psi_some_avg10=0.0,
    psi_full_avg10=0.0,
    time=0.0,
)


# How often `until` looks again while the app waits on a timer or a thread (a poll, a draw at
# FLUSH_HZ): often enough to add little to a wait, seldom enough to cost little CPU.
POLL_S = 0.01


def sample(**changes):
    return SimpleNamespace(**{**SPARK_IDLE, **changes})


class SampleBackend(Backend):
    """Live everywhere except the machine readings, which are fixed."""

    def __init__(self, memory=None, gpu=None):
        self.memory_sample = memory or sample()
        self.gpu_reading = gpu or GpuView(
            util="3%", temp="41°C", power="11.5 W", memory="n/a (unified)", note="NVIDIA GB10"
        )

    def host(self) -> str:
        return "spark-test"

    def model_downloaded(self, model: str) -> bool | None:
        return None  # the machine's own Hugging Face cache stays out of the screens (no download offer)

    def memory(self):
        return self.memory_sample

    def gpu(self):
        return self.gpu_reading


def config_pane(app):
    from sparktui.ui.panes import ConfigPane

    return app.query_one(ConfigPane)


def fit_box(app):
    """The config pane's fit: its spec, machine and fit, and the fit's actions."""
    from sparktui.ui.panes.config_fit import FitBox

    return app.query_one(FitBox)


def server_pane(app):
    from sparktui.ui.panes import ServerPane

    return app.query_one(ServerPane)


def widget(app, cls):
    """The one widget of `cls` on the main screen (dialogs may be on top)."""
    return app.screen_stack[0].query_one(cls)


async def mounted(pilot, cls):
    """`widget(app, cls)` once it is in the DOM: a pane hidden at the start (80x24 shows one at a
    time) mounts its widgets once the first screen is full, or when it is shown."""
    await until(pilot, lambda: bool(pilot.app.screen_stack[0].query(cls)), f"a {cls.__name__} mounted")
    return widget(pilot.app, cls)


def server_record(log_path, *, status="running", exit=None, profile_path=None, **changes):
    """A supervisor state record (the shape runtime/server/supervisor.py writes) for a server on 8000."""
    from sparktui.core.vllm_log import LogSummary

    summary = LogSummary()
    summary.feed_lines(log_path.read_text().splitlines())
    if status == "exited" and exit and exit.get("reason") == "failed":
        summary.finish(exit.get("returncode"))
        exit = {**exit, "failure": summary.failure.to_dict() if summary.failure else None}
    record = {
        "version": 1,
        "status": status,
        "phase": summary.phase if status != "exited" or (exit or {}).get("reason") == "failed" else "stopped",
        "profile": profile_path.stem if profile_path else "unsaved",
        "profile_path": str(profile_path) if profile_path else None,
        "host": "127.0.0.1",
        "port": 8000,
        "url": "http://127.0.0.1:8000",
        "log_path": str(log_path),
        "started_at": 1.0,
        "tree": {"pid": 4242, "start_time": 0},
        "supervisor": {"pid": 4241, "start_time": 0},
        "preflight": {"warnings": [], "fit": None},
        "guard": {
            "armed": True,
            "state": "watching",
            "lines": {"warn_below_gib": 20.0, "term_below_gib": 12.0, "kill_below_gib": 8.0},
            "last": {"action": "ok", "available_gib": 21.6, "rate_gib_s": 0.0, "interval_s": 0.25, "at": 1.0},
        },
        "trip": None,
        "metrics": None,
        "exit": exit,
        "summary": summary.to_dict(),
        "alive": status in ("starting", "running", "stopping"),
    }
    record.update(changes)
    return record


class RecordBackend(SampleBackend):
    """A supervisor seen only through its state record (no processes): the record is set by the
    test; stop and kill end it as the supervisor would record it."""

    def __init__(self, record=None, **kwargs):
        super().__init__(**kwargs)
        self.record = record
        self.attaches = 0

    def attach(self, port=None):
        from sparktui.runtime.records.protocol import StateRecord
        from sparktui.ui.backend import server_status

        self.attaches += 1
        return server_status(StateRecord.model_validate(self.record)) if self.record is not None else None

    def _end(self, reason, returncode):
        self.record = {
            **self.record,
            "status": "exited",
            "phase": "stopped",
            "alive": False,
            "exit": {"reason": reason, "returncode": returncode, "by": "socket", "stop": None, "failure": None},
        }
        return self.attach()

    def stop(self, status):
        return self._end("stopped", 0)

    def kill(self, status):
        return self._end("killed", None)

    def set_guard(self, status, armed=None, lines=None):
        guard = dict(self.record["guard"])
        if armed is not None:
            guard.update(armed=armed, state="watching" if armed else "disarmed")
        if lines:
            guard["lines"] = {**guard["lines"], **lines}
        self.record = {**self.record, "guard": guard}
        return self.attach()


def record_notices(app) -> list[SimpleNamespace]:
    """Every notice the app gives from now on (message, title, severity), kept: Textual drops a
    notice from app._notifications once its timeout passes, which a loaded machine can outlast."""
    said: list[SimpleNamespace] = []
    notify = app.notify

    def recorded(message, *, title="", severity="information", **kwargs):
        said.append(SimpleNamespace(message=str(message), title=title, severity=severity))
        return notify(message, title=title, severity=severity, **kwargs)

    app.notify = recorded
    return said


async def workers_done(app):
    """Wait for the app's workers; one cancelled meanwhile (an exclusive group's newer worker took
    over) is done too, and the waiting goes on for the rest."""
    from textual.worker import WorkerCancelled

    for _ in range(20):
        try:
            await app.workers.wait_for_complete()
            return
        except WorkerCancelled:
            continue


async def until(pilot, condition, what: str, timeout: float = 30.0, detail=None) -> None:
    """Let the app run until condition() holds; fail saying what never came, with detail(app) when
    given (the server, its phase…). Checked each time the app has nothing pending but its workers
    (tests/support/quiet.py: one may hang on purpose), and every POLL_S while what it waits for
    is on a timer or a thread."""
    from textual.css.query import NoMatches

    def holds() -> bool:
        try:
            return bool(condition())
        except NoMatches:  # a widget it looks at is not mounted yet (80x24 mounts hidden panes later)
            return False

    deadline = time.monotonic() + timeout
    if holds():
        return
    while True:
        await until_quiet(pilot.app, workers=False)
        pilot.app.screen._on_timer_update()  # as Pilot.pause() ends
        if holds():
            return
        if time.monotonic() >= deadline:
            extra = f"; {detail(pilot.app)}" if detail is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        await asyncio.sleep(POLL_S)


async def log_drawn(pilot, view, what: str = "the pushed lines drawn") -> None:
    """Until a LogView has drawn every line pushed to it (it draws at FLUSH_HZ), then one more
    round of the app's messages and a screen update, so its size and scroll are what it drew."""
    await until(pilot, lambda: view.drawn, what)
    await pilot.pause()


async def paste_line(pilot, line: str) -> None:
    """F4, the line typed into its prompt, Enter: as a user pastes a `vllm serve` line."""
    from textual.widgets import Input

    await pilot.press("f4")
    await settled(pilot)
    pilot.app.screen.query_one(Input).value = line
    await pilot.press("enter")
    await settled(pilot)


def first_screen_full(app) -> bool:
    """The polls started (they start once the first full screen is up) and the form's later rows
    are mounted: until both, a read may still come (and an app closed mid-mount trips Textual's Select)."""
    return getattr(app, "background_started", True) and all(e.complete for e in app.query(ConfigEditor))


async def settled(pilot, ready=lambda app: True, what: str = "the app to settle", timeout: float = 30.0):
    """Until no worker runs and `ready(app)` holds. One worker's result can start the next
    (profile → form → model spec → fit): on a loaded machine a single wait can fall between them."""
    app = pilot.app
    await pilot.pause()
    await workers_done(app)

    def done() -> bool:
        return first_screen_full(app) and ready(app) and not any(w.is_running for w in app.workers)

    await until(pilot, done, what, timeout)


class RecordsBackend(SampleBackend):
    """Several supervisors seen only through their records (no processes), keyed by port: the
    server list reads them all; stop and kill end only the server they are given."""

    def __init__(self, records, **kwargs):
        super().__init__(**kwargs)
        self.records = {r["port"]: r for r in records}
        self.asked: list[int | None] = []  # the ports attach was asked for, in order
        self.ended: list[tuple[int, str]] = []  # (port, "stopped" | "killed")

    def _parsed(self, port):
        from sparktui.runtime.records.protocol import StateRecord

        return StateRecord.model_validate(self.records[port])

    def attach(self, port=None):
        from sparktui.ui.backend import server_status

        self.asked.append(port)
        if port is None:
            live = [r for r in self.records.values() if r["alive"]]
            if not live:
                return None
            port = max(live, key=lambda r: r["started_at"])["port"]
        return server_status(self._parsed(port)) if port in self.records else None

    def servers(self):
        from sparktui.ui.backend import server_entry

        newest = sorted(self.records.values(), key=lambda r: -r["started_at"])
        return [server_entry(self._parsed(r["port"])) for r in newest]

    def _end(self, port, reason, returncode):
        self.ended.append((port, reason))
        self.records[port] = {
            **self.records[port],
            "status": "exited",
            "phase": "stopped",
            "alive": False,
            "exit": {"reason": reason, "returncode": returncode, "by": "socket", "stop": None, "failure": None},
        }
        return self.attach(port)

    def stop(self, status):
        return self._end(status.port, "stopped", 0)

    def kill(self, status):
        return self._end(status.port, "killed", None)


def two_server_records(tmp_path, *, other_reserves_gib: float = 10.0):
    """:8000 runs the 70B profile (ready, newest); :8001 a small one, still loading weights."""
    from sparktui.core.profiles import resolve_profile
    from tests.support import FIXTURES

    GiB = 2**30
    log = (FIXTURES / "vllm-cpu" / "startup_final_eager.log").read_text()
    ready = tmp_path / "ready.log"
    ready.write_text(log)
    loading = tmp_path / "loading.log"
    loading.write_text("\n".join(log.splitlines()[:8]) + "\nembed-only line\n")
    a = server_record(
        ready,
        profile_path=resolve_profile("70b-dense-single-user"),
        preflight={"warnings": [], "fit": {"kv_cache_bytes": int(28.36 * GiB), "kv_cache_tokens": 185856}},
        reservation={"bytes": int(104.0 * GiB), "basis": "--gpu-memory-utilization 0.85", "priority": 1},
        started_at=2.0,
    )
    b = server_record(
        loading,
        status="starting",
        port=8001,
        url="http://127.0.0.1:8001",
        profile="embed-small",
        reservation={"bytes": int(other_reserves_gib * GiB), "basis": "--gpu-memory-utilization 0.08", "priority": 0},
        tree={"pid": 5252, "start_time": 0},
        started_at=1.0,
    )
    b["phase"] = "loading_weights"
    return [a, b]


def screen_text(app) -> list[str]:
    """The screen as lines of text, read from Textual's own screenshot (SVG) of it."""
    import html
    import re
    from collections import defaultdict

    svg = app.export_screenshot()
    rows: dict[float, list[tuple[float, str]]] = defaultdict(list)
    for m in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        text = html.unescape(re.sub("<[^>]+>", "", m.group(3))).replace("\xa0", " ")
        rows[float(m.group(2))].append((float(m.group(1)), text))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            line = line.ljust(round(x / 12.2)) + text
        lines.append(line.rstrip())
    return lines

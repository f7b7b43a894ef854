"""The bench pane: benchmark the running server with a key, watch its progress, read the results.

It shows a table of the levels (TTFT, inter-token latency, tok/s per user and in all, memory, KV,
energy), a plot of tok/s and TTFT against users (textual-plotext), the DGX Spark guide's published
figure for the same model class beside the measured one, and how the run compares with the
previous run of the same profile. On mount it shows the last recorded run of the server's profile.

It owns its workers: the run (a thread with its own event loop: runtime.bench.run.run_bench) and
the history read. The figures all come from runtime.bench; this module only lays them out.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, cast

from rich.text import Text
from textual import events
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Static

from sparktui.core.bench_checks import implausible
from sparktui.errors import UserError
from sparktui.ui.messages import ShowPane
from sparktui.ui.panes.base import Pane, io_worker

if TYPE_CHECKING:
    from textual.widgets import DataTable, ProgressBar
    from textual_plotext import PlotextPlot

    from sparktui.runtime.bench.history import HistoryRecord
    from sparktui.runtime.bench.results import BenchProgress, BenchReport, BenchSettings, LevelResult
    from sparktui.ui.serverviews import ServerStatus

COLUMNS = (
    "users",
    "TTFT p50/p95 s",
    "ITL p50/p95 ms",
    "tok/s/user",
    "aggregate",
    "err",
    "min avail",
    "peak KV",
    "J/tok",
    "vs previous",
)


# Below this many columns inside the pane (80×24, and 120 columns beside the memory gauge) the
# table takes its short form: shorter headings and figures, no J/tok, the change in % alone.
FULL_TABLE_WIDTH = 110
SHORT_COLUMNS = ("users", "TTFT s", "ITL ms", "tok/s/u", "total", "err", "avail", "KV", "vs prev")


def _num(value: float | None, fmt: str, scale: float = 1.0) -> str:
    return "n/a" if value is None else fmt.format(value * scale)


def level_cells(level: LevelResult, previous: LevelResult | None, short: bool = False) -> tuple[str, ...]:
    """One table row; `previous` is the same number of users in the previous run of the profile.
    `short`: the narrow form (SHORT_COLUMNS), for a pane under FULL_TABLE_WIDTH columns."""
    change = "–"
    if previous is not None and previous.decode_tok_s_per_user and level.decode_tok_s_per_user is not None:
        pct = (level.decode_tok_s_per_user / previous.decode_tok_s_per_user - 1) * 100
        change = f"{pct:+.0f}%" + ("" if short else f" ({previous.decode_tok_s_per_user:.1f})")
    flagged = bool(implausible(level.decode_tok_s_per_user, level.aggregate_tok_s, level.itl_p50_s))
    if short:
        return (
            f"{level.users}" + ("*" if level.partial else ""),
            f"{_num(level.ttft_p50_s, '{:.2f}')}/{_num(level.ttft_p95_s, '{:.2f}')}",
            f"{_num(level.itl_p50_s, '{:.0f}', 1000)}/{_num(level.itl_p95_s, '{:.0f}', 1000)}",
            _num(level.decode_tok_s_per_user, "{:.1f}") + ("?" if flagged else ""),
            _num(level.aggregate_tok_s, "{:.1f}"),
            f"{level.errors}",
            _num(level.min_mem_available_gib, "{:.1f}"),
            _num(level.peak_kv_usage, "{:.0f}%", 100),
            change,
        )
    return (
        f"{level.users}" + (" partial" if level.partial else ""),
        f"{_num(level.ttft_p50_s, '{:.3f}')}/{_num(level.ttft_p95_s, '{:.3f}')}",
        f"{_num(level.itl_p50_s, '{:.1f}', 1000)}/{_num(level.itl_p95_s, '{:.1f}', 1000)}",
        _num(level.decode_tok_s_per_user, "{:.1f}") + (" burst?" if flagged else ""),
        _num(level.aggregate_tok_s, "{:.1f}"),
        f"{level.errors}",
        _num(level.min_mem_available_gib, "{:.1f} GiB"),
        _num(level.peak_kv_usage, "{:.1f}%", 100),
        _num(level.joules_per_token, "{:.2f}"),
        change,
    )


def parse_settings(text: str, base: BenchSettings) -> BenchSettings:
    """ "users=1,5 prompt=256 output=128 requests=2" → settings (unnamed keys keep their value)."""
    from sparktui.runtime.bench.limits import validate

    fields = {"users": "users", "prompt": "prompt_tokens", "output": "output_tokens", "requests": "requests_per_user"}
    changes: dict[str, Any] = {}
    for part in text.split():
        key, sep, value = part.partition("=")
        if not sep or key not in fields:
            raise UserError(f"{part!r}: expected key=value with key one of {', '.join(fields)}")
        try:
            if key == "users":
                changes["users"] = [int(u) for u in value.split(",") if u]
            else:
                changes[fields[key]] = int(value)
        except ValueError:
            raise UserError(f"{part!r}: expected whole numbers (users=1,5,10)") from None
    settings = base.model_copy(update=changes)
    validate(settings)
    return settings


def settings_text(settings: BenchSettings) -> str:
    return (
        f"users={','.join(map(str, settings.users))} prompt={settings.prompt_tokens} "
        f"output={settings.output_tokens} requests={settings.requests_per_user}"
    )


class BenchPane(Pane):
    """Shown while it is the active pane (Ctrl+N, or the bench key): in a wide terminal it then
    takes the config and server panes' place, beside the memory gauge, for the width its table
    and plot need."""

    NAME = "bench"
    TAB = "4 Bench"

    server: reactive[ServerStatus | None] = reactive(None, init=False)

    class Progressed(Message):
        def __init__(self, progress: BenchProgress) -> None:
            super().__init__()
            self.progress = progress

    class Finished(Message):
        def __init__(self, report: BenchReport | None, previous: HistoryRecord | None, error: str | None) -> None:
            super().__init__()
            self.report, self.previous, self.error = report, previous, error

    class HistoryLoaded(Message):
        def __init__(self, last: HistoryRecord | None, previous: HistoryRecord | None) -> None:
            super().__init__()
            self.last, self.previous = last, previous

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings: BenchSettings | None = None
        self.cancel = threading.Event()
        self.busy = False
        self.flags: list[str] = []  # why a level's per-user figure is not a decode speed (core.bench_checks)
        self.built = False
        self.total = 0  # requests in the whole run, for the progress bar
        self.done_before = 0  # requests in the levels already finished
        self.short: bool | None = None  # the table's form (SHORT_COLUMNS), set with its columns
        self.rows: list[tuple[LevelResult, LevelResult | None]] = []  # the table's levels, for a new form
        self._compared: tuple[Any, ...] | None = None  # the notes' last arguments, for a new form

    @property
    def settings(self) -> BenchSettings:
        # Made on first use: runtime.bench's results pull in pydantic, which the panel's first
        # frame should not pay for a pane that is hidden then.
        if self._settings is None:
            from sparktui.runtime.bench.results import BenchSettings

            self._settings = BenchSettings()
        return self._settings

    @settings.setter
    def settings(self, settings: BenchSettings) -> None:
        self._settings = settings

    def on_mount(self) -> None:
        self.border_title = "Bench"

    @property
    def progress_bar(self) -> ProgressBar:
        return cast("ProgressBar", self.query_one("#bench-progress"))

    @property
    def table(self) -> DataTable[str]:
        return cast("DataTable[str]", self.query_one("#bench-table"))

    def build(self) -> None:
        """Its widgets and its history, the first time the pane is shown (or used): the table and
        the progress bar are a dozen widgets to style that the first frame would pay for."""
        if self.built:
            return
        self.built = True
        from textual.widgets import DataTable, ProgressBar  # imported with the pane's first showing

        table: DataTable[str] = DataTable(id="bench-table", cursor_type="row", zebra_stripes=True)
        progress = ProgressBar(id="bench-progress", show_eta=False)
        progress.display = False  # only while a run goes
        self.mount_all(
            [Static(id="bench-head"), progress, Static(id="bench-status"), table, Static(id="bench-compare")]
        )
        self._lay_table()
        self._head()
        self._status("no run yet: the bench key starts one against the running server")
        self._load_history()

    def on_resize(self) -> None:
        if self.built:
            self._lay_table()

    def _lay_table(self) -> None:
        """The table's columns for the pane's width (the short form under FULL_TABLE_WIDTH: at 80×24,
        and at 120 columns beside the gauge, the full one was cut at "min avail  p"), and its rows."""
        short = self.content_region.width < FULL_TABLE_WIDTH
        if short == self.short:
            return
        self.short = short
        table = self.table
        table.clear(columns=True)
        table.add_columns(*(SHORT_COLUMNS if short else COLUMNS))
        for level, previous in self.rows:
            table.add_row(*level_cells(level, previous, short))
        if self._compared is not None:
            self._compare(*self._compared)  # the notes say what the short form leaves out

    def set_active(self, active: bool) -> None:
        # The screen's class, set with the pane's own: app.tcss lets the pane take the config and
        # server panes' place (a Show event, racing the pane's first build, could come too late).
        super().set_active(active)
        self.screen.set_class(active, "-bench")
        if active:
            self.build()

    def on_show(self, event: events.Show) -> None:
        self.build()  # shown on its own (outside the panel, as in its tests)

    def watch_server(self, old: ServerStatus | None, new: ServerStatus | None) -> None:
        if not self.built:
            return  # build() reads the server's history when the pane is first shown
        self._head()
        if (old.profile if old else None) != (new.profile if new else None) and not self.busy:
            self._load_history()

    # -- actions (keys from the app's action table run these) ---------------------------------------

    def action_run_bench(self) -> None:
        """Start a run, or cancel the one in progress."""
        self.post_message(ShowPane(self.NAME))
        self.build()
        if self.busy:
            self.cancel.set()
            self._status("cancelling: the results so far are kept, marked partial")
            return
        self.busy = True
        self.cancel = threading.Event()
        self.total = sum(u * self.settings.requests_per_user for u in self.settings.users)
        self.done_before = 0
        self.progress_bar.update(total=self.total, progress=0)
        self.progress_bar.display = True
        self._head()
        self._status(f"benchmarking: {settings_text(self.settings)}")
        self._run(self.settings, self._server_port())

    def action_bench_settings(self) -> None:
        from sparktui.ui.screens import PromptScreen

        self.build()

        def chosen(result: object) -> None:
            from sparktui.runtime.bench.results import BenchSettings

            if isinstance(result, BenchSettings):
                self.settings = result
                self._head()

        self.app.push_screen(
            PromptScreen(
                "Benchmark settings", lambda text: parse_settings(text, self.settings), settings_text(self.settings)
            ),
            chosen,
        )

    # -- workers --------------------------------------------------------------------------------------

    @io_worker("bench-run", "benchmarking the server")
    def _run(self, settings: BenchSettings, port: int | None) -> None:
        from sparktui.runtime.bench.history import append_history, previous_run, read_history
        from sparktui.runtime.bench.run import run_bench
        from sparktui.runtime.bench.target import resolve_target

        try:
            target = resolve_target(port)
            report = run_bench(target, settings, progress=self._progressed, cancel=self.cancel)
            append_history(report)
            previous = previous_run(read_history(), report.server.profile, before=report.finished_at)
        except UserError as exc:
            self.post_message(self.Finished(None, None, str(exc)))
            return
        self.post_message(self.Finished(report, previous, report.error))

    def _progressed(self, progress: BenchProgress) -> None:
        self.post_message(self.Progressed(progress))  # from the worker thread: post_message is thread-safe

    @io_worker("bench-history", "reading the benchmark history")
    def _load_history(self) -> None:
        from sparktui.runtime.bench.history import previous_run, read_history

        records = read_history()
        profile = self._server_profile()
        mine = [r for r in records if profile is None or r.key.profile == profile]
        last = mine[-1] if mine else None
        previous = previous_run(records, last.key.profile, before=last.recorded_at) if last else None
        self.post_message(self.HistoryLoaded(last, previous))

    # -- messages -------------------------------------------------------------------------------------

    def on_bench_pane_progressed(self, message: Progressed) -> None:
        p = message.progress
        if p.result is not None:
            self.done_before += p.done
            self.progress_bar.update(progress=self.done_before)
            self._status(f"{p.users} users done: {_num(p.result.decode_tok_s_per_user, '{:.1f}')} tok/s each")
            return
        self.progress_bar.update(progress=self.done_before + p.done)
        self._status(f"level {p.level}: {p.users} users, {p.done}/{p.total} requests")

    def on_bench_pane_finished(self, message: Finished) -> None:
        self.busy = False
        self.progress_bar.display = False
        if message.report is None:
            self._status(Text(f"cannot benchmark: {message.error}", style="bold red"))
            return
        report = message.report
        self.show_run(report.runs, report.server.model, report.server.model_path, message.previous)
        when = time.strftime("%H:%M", time.localtime(report.finished_at))
        if report.partial:
            self._status(Text(f"run at {when} ended early ({report.error}): partial results", style="bold yellow"))
        else:
            self._status(f"run at {when}: {len(report.runs)} levels, saved to the history")

    def on_bench_pane_history_loaded(self, message: HistoryLoaded) -> None:
        if message.last is None or self.busy:
            return
        last = message.last
        self.show_run(last.runs, last.server.model, last.server.model_path, message.previous)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last.recorded_at))
        self._status(
            f"last recorded run of {last.key.profile or 'this server'}, {when}" + (" (partial)" if last.partial else "")
        )

    # -- drawing --------------------------------------------------------------------------------------

    def show_run(
        self, runs: list[LevelResult], model: str, model_path: str | None, previous: HistoryRecord | None
    ) -> None:
        before = {r.users: r for r in previous.runs} if previous is not None else {}
        table = self.table
        table.clear()
        flags: list[str] = []
        self.rows = [(level, before.get(level.users)) for level in sorted(runs, key=lambda r: r.users)]
        for level, was in self.rows:
            table.add_row(*level_cells(level, was, bool(self.short)))
            why = implausible(level.decode_tok_s_per_user, level.aggregate_tok_s, level.itl_p50_s)
            flags += [f"{level.users} users: {w}" for w in why[:1]]
        self.flags = flags
        self._plot(runs)
        self._compare(runs, model, model_path, previous)

    def _plot_widget(self) -> PlotextPlot:
        """The plot, made when there is first something to draw: importing plotext costs about
        0.2 s, which the panel's first frame should not pay."""
        from textual_plotext import PlotextPlot

        found = self.query(PlotextPlot)
        if found:
            return found.first()
        widget = PlotextPlot(id="bench-plot")
        self.mount(widget, before="#bench-compare")
        return widget

    def _plot(self, runs: list[LevelResult]) -> None:
        widget = self._plot_widget()
        plt = widget.plt
        plt.clear_figure()
        levels = sorted(runs, key=lambda r: r.users)
        # a per-user rate that is a burst's, not a decode speed, is left off (the table flags it)
        per_user = [
            None if implausible(r.decode_tok_s_per_user, r.aggregate_tok_s, r.itl_p50_s) else r.decode_tok_s_per_user
            for r in levels
        ]
        for label, values, side in (
            ("tok/s per user", per_user, "left"),
            ("aggregate tok/s", [r.aggregate_tok_s for r in levels], "left"),
            ("TTFT p95 s", [r.ttft_p95_s for r in levels], "right"),
        ):
            points = [(r.users, v) for r, v in zip(levels, values, strict=True) if v is not None]
            if points:
                plt.plot([x for x, _ in points], [y for _, y in points], label=label, yside=side, marker="braille")
        plt.xticks([r.users for r in levels])
        plt.xlabel("users")
        plt.title("tok/s (left) and TTFT (right) against users")
        widget.refresh()

    def _compare(
        self, runs: list[LevelResult], model: str, model_path: str | None, previous: HistoryRecord | None
    ) -> None:
        from sparktui.core.published_speeds import published_speed

        self._compared = (runs, model, model_path, previous)
        lines = Text()
        guide = published_speed(model_path, model)
        one = next((r for r in runs if r.users == 1), None)
        measured = (
            f"measured {_num(one.decode_tok_s_per_user, '{:.1f}')} tok/s, TTFT {_num(one.ttft_p50_s, '{:.2f}')} s"
            if one is not None
            else "no 1-user level in this run"
        )
        if guide is not None:
            ttft = f", TTFT {guide.ttft_s:g} s" if guide.ttft_s is not None else ""
            users = f", {guide.max_users[0]}–{guide.max_users[1]} users at most" if guide.max_users else ""
            lines.append(f"guide, {guide.model_class} {guide.quantization}: {guide.tok_s_text()} one user{ttft}{users}")
            lines.append(f"  |  {measured}\n")
        else:
            lines.append(f"the guide publishes no figure for {model_path or model}\n")
        if previous is not None:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(previous.recorded_at))
            lines.append(f"compared with the previous run of {previous.key.profile or 'this server'} at {when}")
            if previous.key.vllm_version or previous.key.flags:
                lines.append(
                    f" (vLLM {previous.key.vllm_version or '?'}, {' '.join(previous.key.flags) or 'no flags'})"
                )
        else:
            lines.append("no previous run of this profile to compare with")
        if self.short:  # what the short table leaves out, where there is any: J/tok, the previous tok/s/user
            parts = []
            if any(lv.joules_per_token is not None for lv, _ in self.rows):
                parts.append(
                    "J/tok " + " ".join(f"{lv.users}u {_num(lv.joules_per_token, '{:.2f}')}" for lv, _ in self.rows)
                )
            if any(p is not None and p.decode_tok_s_per_user is not None for _, p in self.rows):
                was = (p.decode_tok_s_per_user if p else None for _, p in self.rows)
                parts.append(
                    "previous tok/s/u "
                    + " ".join(f"{lv.users}u {_num(w, '{:.1f}')}" for (lv, _), w in zip(self.rows, was, strict=True))
                )
            if parts:
                lines.append("\n" + " · ".join(parts))
        for flag in self.flags:
            lines.append(f"\nnot plotted, {flag}", "bold")
        self.query_one("#bench-compare", Static).update(lines)

    def _head(self) -> None:
        port = self._server_port()
        where = f"the server on port {port}" if port else "the server sparktui runs"
        self.query_one("#bench-head", Static).update(f"Bench {where}: {settings_text(self.settings)}")

    def _status(self, text: str | Text) -> None:
        self.query_one("#bench-status", Static).update(text)

    def worker_failed(self, worker: Any) -> None:
        self.busy = False

    # -- the app's server (bound from the app's shared reactive) ---------------------------------

    def _server_port(self) -> int | None:
        """The app's live server; None: the only server sparktui runs (resolve_target decides)."""
        return self.server.port if self.server is not None and self.server.live else None

    def _server_profile(self) -> str | None:
        return self.server.profile if self.server is not None else None

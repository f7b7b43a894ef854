"""The bench pane, driven with Pilot against the timed server: a run, its table and plot, the
comparison with the previous run, the guide's figure, settings, and a clear error without a server."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable, ProgressBar, Static
from textual_plotext import PlotextPlot

from sparktui.errors import UserError
from sparktui.runtime.bench.results import BenchSettings, LevelResult
from sparktui.runtime.records.protocol import Condition, ConditionView
from sparktui.ui.app import SparkApp
from sparktui.ui.panes.bench import BenchPane, level_cells, parse_settings
from sparktui.ui.serverviews import ServerStatus
from tests.support import free_port
from tests.support.app import SampleBackend, until, workers_done
from tests.support.timed_server import running

pytestmark = pytest.mark.slow


class BenchApp(App[None]):
    """The pane alone, given a live server on `port` as the control panel would bind it."""

    def __init__(self, port: int) -> None:
        super().__init__()
        self.port = port

    def compose(self) -> ComposeResult:
        yield BenchPane(id="bench-pane", classes="-active")

    def on_mount(self) -> None:
        ready = ConditionView(condition=Condition.READY)
        self.query_one(BenchPane).server = ServerStatus(condition=ready, port=self.port)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))


def text(app: App[None], selector: str) -> str:
    return str(app.query_one(selector, Static).render())


async def run_and_wait(pilot) -> None:
    pane = pilot.app.query_one(BenchPane)
    pane.action_run_bench()
    await pilot.pause()
    await workers_done(pilot.app)
    await pilot.pause()


async def test_a_run_fills_the_table_and_plot_and_a_second_compares_with_it():
    with running(ttft=0.05, rate=100) as (url, _):
        app = BenchApp(int(url.rsplit(":", 1)[1]))
        async with app.run_test(size=(140, 50)) as pilot:
            await workers_done(app)
            pane = app.query_one(BenchPane)
            assert "no run yet" in text(app, "#bench-status")
            pane.settings = BenchSettings(users=[1, 2], prompt_tokens=8, output_tokens=8, requests_per_user=2)
            await run_and_wait(pilot)
            table = app.query_one(DataTable)
            assert table.row_count == 2
            assert [table.get_row_at(i)[0] for i in range(2)] == ["1", "2"]
            assert table.get_row_at(0)[-1] == "–"  # nothing to compare with yet
            assert app.query_one(ProgressBar).progress == 6  # 1×2 + 2×2 requests (hidden again now)
            assert "saved to the history" in text(app, "#bench-status")
            compare = text(app, "#bench-compare")
            assert "the guide publishes no figure for timed-model" in compare and "no previous run" in compare
            plot = str(app.query_one(PlotextPlot).render())
            assert "tok/s per user" in plot and "aggregate tok/s" in plot and "TTFT p95 s" in plot  # the legend

            await run_and_wait(pilot)
            assert table.get_row_at(0)[-1].endswith(")") and "%" in table.get_row_at(0)[-1]
            assert "compared with the previous run" in text(app, "#bench-compare")


async def test_without_a_server_it_says_so():
    app = BenchApp(free_port())
    async with app.run_test(size=(140, 50)) as pilot:
        await run_and_wait(pilot)
        assert "cannot benchmark: cannot connect to" in text(app, "#bench-status")
        assert app.query_one(BenchPane).busy is False


async def test_the_last_recorded_run_shows_on_mount():
    with running(ttft=0.05, rate=100) as (url, _):
        app = BenchApp(int(url.rsplit(":", 1)[1]))
        async with app.run_test(size=(140, 50)) as pilot:
            app.query_one(BenchPane).settings = BenchSettings(users=[1], prompt_tokens=8, output_tokens=4)
            await run_and_wait(pilot)
    again = BenchApp(free_port())
    async with again.run_test(size=(140, 50)) as pilot:
        await workers_done(again)
        await pilot.pause()
        assert "last recorded run" in text(again, "#bench-status")
        assert again.query_one(DataTable).row_count == 1


async def test_in_the_control_panel_f10_shows_the_pane_and_runs_it(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        pane = app.query_one(BenchPane)
        assert not pane.display or pane.region.width == 0  # hidden until asked for
        assert not pane.built and not pane.children  # nothing of it in the first frame
        await pilot.press("f10")
        await until(pilot, lambda: pane.region.width > 60, "the bench pane in the config and server panes' place")
        await workers_done(app)
        assert app.pane == "bench" and pane.has_class("-active")
        assert app.screen.has_class("-bench")  # the config and server panes made room
        assert app.query_one("#memory-pane").region.width > 0
        await until(pilot, lambda: "cannot benchmark: no server" in text(app, "#bench-status"), "the error")
        assert "cannot benchmark: no server is running" in text(app, "#bench-status")
        await pilot.press("ctrl+n")  # on to the next pane: the server pane is back
        await until(pilot, lambda: app.query_one("#server-pane").region.width > 0, "the server pane back")
        assert not app.screen.has_class("-bench")


def test_settings_are_parsed_and_checked():
    base = BenchSettings()
    assert parse_settings("users=1,3 output=4", base).model_dump() == {
        **base.model_dump(),
        "users": [1, 3],
        "output_tokens": 4,
    }
    with pytest.raises(UserError, match="expected key=value"):
        parse_settings("users 1", base)
    with pytest.raises(UserError, match="--output-tokens 1"):
        parse_settings("output=1", base)


def test_the_guide_figure_is_set_beside_a_measured_level():
    level = LevelResult(
        users=1, ttft_p50_s=0.1, ttft_p95_s=0.2, itl_p50_s=0.02, itl_p95_s=0.03, decode_tok_s_per_user=48.0,
        aggregate_tok_s=47.0, requests=2, errors=0, wall_s=1.0, output_tokens=10, prompt_tokens_mean=8,
        min_mem_available_gib=None, peak_kv_usage=None, mean_power_w=None, joules_per_token=None,
        client_cpu_s_per_request=None,
    )  # fmt: skip
    slower = level.model_copy(update={"decode_tok_s_per_user": 40.0})
    cells = level_cells(level, slower)
    assert cells[3] == "48.0" and cells[-1] == "+20% (40.0)" and cells[6] == "n/a" and cells[8] == "n/a"


def bursty_level(users: int = 1) -> LevelResult:
    """What the CPU build gave: tokens in bursts, a 'per-user rate' 350× the aggregate, ITL p50 0."""
    return LevelResult(
        users=users, ttft_p50_s=0.3, ttft_p95_s=0.4, itl_p50_s=0.0, itl_p95_s=0.0001, decode_tok_s_per_user=29781.1,
        aggregate_tok_s=83.9, requests=2, errors=0, wall_s=1.0, output_tokens=84, prompt_tokens_mean=8,
        min_mem_available_gib=20.1, peak_kv_usage=0.01, mean_power_w=None, joules_per_token=None,
        client_cpu_s_per_request=None,
    )  # fmt: skip


async def test_a_per_user_rate_far_above_the_aggregate_is_flagged_not_plotted():
    app = BenchApp(free_port())
    async with app.run_test(size=(140, 50)) as pilot:
        await workers_done(app)
        pane = app.query_one(BenchPane)
        pane.build()
        await pilot.pause()
        pane.show_run([bursty_level()], "tiny", None, None)
        await pilot.pause()
        table = app.query_one(DataTable)
        assert str(table.get_row_at(0)[3]) == "29781.1 burst?"
        assert "not plotted, 1 users: 29781.1 tok/s per user is 355× the aggregate" in text(app, "#bench-compare")
        assert pane.flags


def test_the_bench_command_flags_a_burst_rate():
    from sparktui.commands.bench import level_row

    row = level_row(bursty_level())
    assert "not a decode speed: 29781.1 tok/s per user is 355× the aggregate 83.9" in row

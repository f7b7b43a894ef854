"""The trade-off grid in the panel (fit.grid): beside the fit, the form's cell marked, Enter applies a cell."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Input

from sparktui.ui.app import SparkApp
from sparktui.ui.grid_screen import GridScreen
from tests.support.app import SampleBackend, config_pane, fit_box, settled


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


async def test_the_grid_marks_the_forms_cell_and_enter_applies_another():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        config = config_pane(app).form.config
        assert (config.max_num_seqs, config.max_model_len) == (5, 8192)
        await pilot.press("ctrl+y")
        await settled(pilot, lambda a: isinstance(a.screen, GridScreen), "the grid")
        screen = app.screen
        current = screen.highlighted()
        assert (current.max_num_seqs, current.max_model_len, current.current) == (5, 8192, True)
        assert [c for c in screen.grid.cells if c.current] == [current]
        table = screen.query_one(DataTable)
        assert "▶" in str(table.get_cell_at(table.cursor_coordinate))
        await pilot.press("down", "right")  # 10 users, 16k
        chosen = screen.highlighted()
        assert (chosen.max_num_seqs, chosen.max_model_len) == (10, 16384)
        await pilot.press("enter")
        await settled(pilot)
        assert not isinstance(app.screen, GridScreen)
        config = config_pane(app).form.config
        assert (config.max_num_seqs, config.max_model_len) == (10, 16384)
        assert app.query_one("#flag-max_num_seqs", Input).value == "10"
        assert fit_box(app).fit.verdict == chosen.verdict


async def test_the_palette_lists_the_trade_off_grid():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"Trade-off grid")
        await settled(pilot)
        await pilot.press("enter")
        await settled(pilot, lambda a: isinstance(a.screen, GridScreen), "the grid from the palette")
        await pilot.press("escape")
        await settled(pilot)
        assert not isinstance(app.screen, GridScreen)


async def test_the_grid_estimates_no_speed(speed_estimates):
    # each cell's fit estimated a decode speed the grid does not show (a column of verdicts)
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert speed_estimates  # the form's own fit estimates its speed: the count sees it
        speed_estimates.clear()
        await pilot.press("ctrl+y")
        await settled(pilot, lambda a: isinstance(a.screen, GridScreen), "the grid")
        assert len(app.screen.grid.cells) > 1
        assert speed_estimates == [], len(speed_estimates)

"""The bench table is not cut at 80×24, nor at 120 columns beside the memory gauge (issue 23, item 9:
it ended at "min avail  p"): a short form there, every column in view; the full one where it fits."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from sparktui.ui.app import SparkApp
from sparktui.ui.panes.bench import BenchPane
from tests.support.app import SampleBackend, screen_text, settled
from tests.support.bench_levels import RUNS, previous_record


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))


async def shown_table(pilot) -> DataTable:
    app = pilot.app
    await settled(pilot)
    app.show_pane("bench")
    await settled(pilot)
    pane = app.query_one(BenchPane)
    pane.show_run(RUNS, "tiny", None, previous_record())
    await settled(pilot)
    return app.query_one("#bench-table", DataTable)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_bench_table_fits_the_pane_with_every_column_in_view(size):
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=size) as pilot:
        table = await shown_table(pilot)
        assert table.row_count == 4
        inside = table.scrollable_content_region.width
        assert table.virtual_size.width <= inside, (table.virtual_size.width, inside, screen_text(app))
        assert table.max_scroll_x == 0
        text = "\n".join(screen_text(app))
        heading = next(line for line in screen_text(app) if "users" in line and "TTFT" in line)
        assert "vs prev" in heading, heading  # the last column, not cut
        assert "29781.1?" in text and "20*" in text and "+22%" in text, text  # burst, partial, change
        # what the short form leaves out is under the plot: the previous run's tok/s/user, and J/tok
        # where measured (the runs here have none: the line leaves it out)
        notes = " ".join(line.strip() for line in screen_text(app))
        assert "previous tok/s/u 1u 20.0" in notes and "J/tok" not in notes, notes
        pane = app.query_one(BenchPane)
        pane.show_run([r.model_copy(update={"joules_per_token": 0.52}) for r in RUNS], "tiny", None, previous_record())
        await settled(pilot)
        notes = " ".join(line.strip() for line in screen_text(app))
        assert "J/tok 1u 0.52 5u 0.52" in notes and "previous tok/s/u 1u 20.0" in notes, notes


async def test_a_wide_pane_keeps_the_full_table():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(180, 40)) as pilot:
        table = await shown_table(pilot)
        assert [str(c.label) for c in table.columns.values()][-2:] == ["J/tok", "vs previous"]
        assert table.virtual_size.width <= table.scrollable_content_region.width
        assert str(table.get_row_at(1)[3]) == "29781.1 burst?" and str(table.get_row_at(0)[-1]) == "+22% (20.0)"

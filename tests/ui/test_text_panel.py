"""ui.widgets.base.TextPanel repaints when what it draws changes, colours included: the phase strip
says "ready" only by colour (its words are those of a strip with no server); and a panel's height is
that of its text drawn at the width the layout asks about."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Size

from sparktui.core.units import GiB
from sparktui.ui.widgets.fitpanel import FitPanel, FitView
from sparktui.ui.widgets.server import PhaseStrip


class StripApp(App[None]):
    def compose(self) -> ComposeResult:
        yield PhaseStrip()


def colours(strip: PhaseStrip) -> set[str]:
    return {str(seg.style.color) for seg in strip.render_line(0) if seg.style is not None and seg.text.strip()}


async def test_a_change_of_colour_alone_repaints_the_strip():
    app = StripApp()
    async with app.run_test(size=(100, 5)) as pilot:
        strip = app.query_one(PhaseStrip)
        strip.set_phase(None)
        await pilot.pause()
        before = colours(strip)
        strip.set_phase("ready")  # the same words, every phase now done
        await pilot.pause()
        after = colours(strip)
        done = strip.get_component_rich_style("phase--done").color
        assert str(done) in after and after != before, (before, after)


class GaugeApp(App[None]):
    CSS = "MemoryGauge { width: 34; }"

    def compose(self) -> ComposeResult:
        from sparktui.ui.widgets.gauge import MemoryGauge

        yield MemoryGauge()


def drawn_whole(panel) -> list[list[tuple[str, object]]]:
    """The panel's text drawn at once, as Textual draws a widget's render()."""
    from textual.visual import Visual, visualize

    strips = Visual.to_strips(panel, visualize(panel, panel.render()), panel.size.width, None, panel.visual_style)
    return [[(seg.text, seg.style) for seg in strip] for strip in strips]


def drawn_rows(panel) -> list[list[tuple[str, object]]]:
    return [[(seg.text, seg.style) for seg in panel.render_line(y)] for y in range(panel.size.height)]


async def test_the_gauge_repaints_only_the_lines_a_sample_changes_and_draws_them_as_a_whole_draw_would():
    from textual.geometry import Region

    from sparktui.core.units import GiB
    from sparktui.ui.widgets.gauge import MemoryGauge
    from tests.support.app import sample

    app = GaugeApp()
    async with app.run_test(size=(60, 30)) as pilot:
        gauge = app.query_one(MemoryGauge)
        gauge.history.extend([112.4] * 40)  # a full sparkline: one more equal reading leaves it as it is
        gauge.update_sample(sample())
        await pilot.pause()
        assert drawn_rows(gauge) == drawn_whole(gauge)
        asked: list[tuple[Region, ...]] = []
        refresh = gauge.refresh

        def recorded(*regions, **kwargs):
            asked.append(regions)
            return refresh(*regions, **kwargs)

        gauge.refresh = recorded  # type: ignore[method-assign]
        gauge.update_sample(sample(mem_free=int(90.1 * GiB)))
        await pilot.pause()
        rows = ["".join(text for text, _ in row) for row in drawn_rows(gauge)]
        row = next(y for y, line in enumerate(rows) if line.startswith("MemFree"))
        assert rows[row].startswith("MemFree       90.1 GiB") and row > 1  # the first line takes two rows
        assert asked == [(Region(0, row, gauge.size.width, 1),)], asked
        assert drawn_rows(gauge) == drawn_whole(gauge)
        gauge.update_sample(sample(mem_available=int(50 * GiB)))  # the bar, the figures, the sparkline
        await pilot.pause()
        assert drawn_rows(gauge) == drawn_whole(gauge)
        app.theme = "textual-light"  # new colours: every row drawn again
        await pilot.pause()
        assert drawn_rows(gauge) == drawn_whole(gauge)


class FitApp(App[None]):
    def compose(self) -> ComposeResult:
        yield FitPanel()


async def test_the_height_asked_for_a_width_is_that_of_the_text_drawn_at_that_width():
    """A layout asks a panel's height for a width it is not laid out at yet: the fit box's scrollbar
    comes and goes (38 and 37 columns at 120×40). Drawn at the old width and wrapped at the new one,
    the fit's bar took a line more, and which answer the last layout kept depended on the order of
    the layouts: the main screen's snapshot showed another scrollbar thumb under load."""
    view = FitView(
        "fits",
        ["weights and KV fit"],
        segments=[("os", "OS keeps", 8 * GiB), ("weights", "weights", 60 * GiB), ("kv", "KV", 30 * GiB)],
        pool_bytes=200 * GiB,
        mem_available=100 * GiB,  # the marker line: 40 columns wide at 40, its note moved left at 39
    )
    app = FitApp()
    async with app.run_test(size=(40, 40)) as pilot:
        panel = app.query_one(FitPanel)
        panel.show(view)
        await pilot.pause()
        assert panel.size.width == 40
        asked = panel.get_content_height(Size(39, 40), Size(39, 40), 39)
        await pilot.resize_terminal(39, 40)
        await pilot.pause()
        assert panel.size.width == 39
        assert asked == panel.size.height, (asked, panel.size.height)

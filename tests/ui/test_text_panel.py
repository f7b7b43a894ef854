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

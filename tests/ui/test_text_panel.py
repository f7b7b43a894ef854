"""ui.widgets.base.TextPanel repaints when what it draws changes, colours included: the phase strip
says "ready" only by colour (its words are those of a strip with no server)."""

from __future__ import annotations

from textual.app import App, ComposeResult

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

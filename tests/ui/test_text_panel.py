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


async def test_a_sample_that_changes_nothing_drawn_draws_nothing_and_one_that_does_draws_it():
    """update_sample compares what a draw shows of the sample (figures to 0.1 GiB, the bar's cells,
    the sparkline, PSI, the GPU) before drawing: most samples of an idle machine change none of it,
    and drawing the gauge to compare its text was most of an idle second's work."""
    from sparktui.ui.widgets.gauge import MemoryGauge
    from tests.support.app import sample

    app = GaugeApp()
    async with app.run_test(size=(60, 30)) as pilot:
        gauge = app.query_one(MemoryGauge)
        gauge.history.extend([112.4] * 40)  # a full sparkline: readings this close leave it as it is
        gauge.update_sample(sample())
        await pilot.pause()
        draws: list[int] = []
        draw = gauge._draw

        def counted(width: int):
            draws.append(width)
            return draw(width)

        gauge._draw = counted  # type: ignore[method-assign]
        base = sample()
        jitter = sample(mem_available=base.mem_available + 3 * 2**20, mem_free=base.mem_free - 2**20)
        gauge.update_sample(jitter)  # a few MiB: nothing drawn moves
        await pilot.pause()
        assert draws == [], "a sample that changes nothing drawn was drawn"
        gauge.update_sample(sample(psi_some_avg10=1.25))
        await pilot.pause()
        assert draws, "a new PSI figure was not drawn"
        assert any(line.startswith("PSI some/full 1.25") for line in gauge.render().plain.splitlines())
        assert drawn_rows(gauge) == drawn_whole(gauge)


async def test_the_gauge_works_out_its_colours_once_per_style_not_once_per_sample():
    """A sample that moves a figure draws the gauge again with the colours it already worked out
    (Textual forgets its own at every refresh, and works each out through every ancestor); a new
    theme works them out again, and the gauge shows the new colours."""
    from sparktui.ui.widgets.gauge import MemoryGauge
    from tests.support.app import sample

    app = GaugeApp()
    async with app.run_test(size=(60, 30)) as pilot:
        gauge = app.query_one(MemoryGauge)
        gauge.update_sample(sample())
        await pilot.pause()
        asked: list[tuple[str, ...]] = []
        ask = gauge.get_component_rich_style

        def counted(*names, **kwargs):
            asked.append(names)
            return ask(*names, **kwargs)

        gauge.get_component_rich_style = counted  # type: ignore[method-assign]
        for gib in (100.0, 90.0, 80.0):
            gauge.update_sample(sample(mem_available=int(gib * GiB)))
            await pilot.pause()
        assert asked == [], f"{len(asked)} colours worked out again for 3 samples"
        assert drawn_rows(gauge) == drawn_whole(gauge)
        used = gauge.component_style("gauge--used")
        app.theme = "textual-light"
        await pilot.pause()
        assert asked, "a new theme's colours were not worked out"
        assert gauge.component_style("gauge--used") != used
        assert drawn_rows(gauge) == drawn_whole(gauge)


def test_two_samples_that_look_alike_to_the_gauge_draw_alike():
    """The comparison stands for the draw: for samples around an idle Spark's, equal keys draw equal
    text (words and colours), at the pane's widths."""
    import random

    from sparktui.ui.widgets.gauge import MemoryGauge
    from tests.support.app import sample

    rng = random.Random(23)
    gauge = MemoryGauge()
    base = sample()
    for width in (28, 34, 60):
        keys: dict[tuple[object, ...], tuple[str, object]] = {}
        for _ in range(400):
            s = sample(
                mem_available=base.mem_available + rng.randrange(-3, 3) * 40 * 2**20,
                mem_free=base.mem_free + rng.randrange(-2, 2) * 40 * 2**20,
                page_cache=base.page_cache + rng.randrange(-2, 2) * 40 * 2**20,
                psi_some_avg10=rng.choice([0.0, 0.004, 0.01]),
            )
            gauge.sample = s
            gauge.history.append(s.mem_available / GiB)
            text = gauge._draw(width)
            drawn = (text.plain, text.spans)
            assert keys.setdefault(gauge._sample_shown(width), drawn) == drawn
        assert len(keys) > 5  # the samples did move what is drawn, now and then


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

"""What fits where: the memory pane is 32 columns wide at 120×40, and its GPU figures take a
second line there by design instead of wrapping mid-figure."""

from __future__ import annotations

import pytest
from textual.geometry import Region

from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.gauge import GpuView, MemoryGauge, packed
from tests.support.app import SampleBackend, mounted, until

pytestmark = pytest.mark.usefixtures("isolated")

BUSY_SPARK = GpuView(util="100%", temp="72°C", power="45.3 W", memory="n/a (unified)", note="NVIDIA GB10")


def screen_lines(w) -> list[str]:
    region = Region(0, 0, w.size.width, w.size.height)
    return ["".join(seg.text for seg in strip).rstrip() for strip in w.render_lines(region)]


@pytest.mark.parametrize(("size", "lines"), [((120, 40), 2), ((80, 24), 1)], ids=["120x40", "80x24"])
async def test_the_gpu_figures_fit_the_memory_pane(size, lines):
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend(gpu=BUSY_SPARK))
    async with app.run_test(size=size) as pilot:
        app.show_pane("memory")
        gauge = await mounted(pilot, MemoryGauge)
        await until(pilot, lambda: gauge.gpu.util == "100%" and gauge.size.width > 0, "the GPU reading")
        await pilot.pause()
        shown = screen_lines(gauge)
        first = next(i for i, line in enumerate(shown) if line.startswith("GPU "))
        gpu_rows = shown[first : first + lines]
        # Every figure whole, on the rows the GPU line was given, and nothing of it on the next one.
        assert [w for w in " ".join(gpu_rows).split() if w != "·"] == ["GPU", "100%", "72°C", "45.3", "W"], shown
        assert shown[first + lines].startswith("GPU memory"), shown
        if lines == 2:
            assert gpu_rows[1].startswith(" " * 14), gpu_rows  # under the figures, not the label


def test_figures_are_packed_between_parts_never_inside_one_between_parts_never_inside_one():
    assert packed(["100%", "72°C", "45.3 W"], 14, " · ") == ["100% · 72°C", "45.3 W"]
    assert packed(["100%", "72°C", "45.3 W"], 40, " · ") == ["100% · 72°C · 45.3 W"]
    assert packed(["a-very-long-part"], 4, " ") == ["a-very-long-part"]

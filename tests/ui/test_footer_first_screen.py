"""Until the first full screen is drawn the key bar draws its keys itself, as one line (the key
widgets, eleven at 80×24, were a tenth of that screen's CPU); once it is up the key widgets are
mounted. Both draw the same cells: each character, its colour and its background."""

from __future__ import annotations

import html
import re

import pytest
from textual.widgets._footer import FooterKey

from sparktui.ui.app import SparkApp
from sparktui.ui.panes import MemoryPane, ServerPane
from sparktui.ui.widgets.footer import PanelFooter
from tests.support.app import SampleBackend, settled

pytestmark = pytest.mark.usefixtures("isolated")

CELL = 12.2  # a cell's width in Textual's SVG screenshots


def last_row(svg: str) -> dict[int, tuple[str, str, str]]:
    """The bottom row of a screenshot, cell by cell: (character, its style, its background)."""
    svg = re.sub(r"terminal-\d+-", "terminal-", svg)
    styles = dict(re.findall(r"\.(terminal-r\d+) \{ ([^}]*) \}", svg))
    bottom = max(float(y) for y in re.findall(r'<text [^>]*y="([\d.]+)"', svg))
    cells: dict[int, list[str]] = {}
    for fill, x, y, width in re.findall(r'<rect fill="(#\w+)" x="([\d.]+)" y="([\d.]+)" width="([\d.]+)"', svg):
        if abs(float(y) - (bottom - 18.5)) < 3:
            for c in range(round(float(x) / CELL), round((float(x) + float(width)) / CELL)):
                cells.setdefault(c, [" ", "", ""])[2] = fill
    for cls, x, y, text in re.findall(r'<text class="([^"]+)" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        if float(y) == bottom:
            for i, ch in enumerate(html.unescape(text).replace("\xa0", " ")):
                cell = cells.setdefault(round(float(x) / CELL) + i, [" ", "", ""])
                cell[0], cell[1] = ch, styles.get(cls, cls) if ch != " " else ""  # a space shows no colour
    return {c: (v[0], v[1], v[2]) for c, v in cells.items()}


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
@pytest.mark.parametrize("theme", ["sparktui-dark", "sparktui-light"])
async def test_the_first_screens_key_bar_is_text_drawn_as_the_key_widgets_draw_it(monkeypatch, size, theme):
    monkeypatch.setattr(ServerPane, "POLL_S", 3600.0)
    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)
    at_first_screen: list[tuple[int, str]] = []
    as_widgets = PanelFooter.keys_as_widgets

    def recording(footer: PanelFooter) -> None:
        at_first_screen.append((len(footer.query(FooterKey)), footer.app.export_screenshot()))
        as_widgets(footer)

    monkeypatch.setattr(PanelFooter, "keys_as_widgets", recording)
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend(), theme_name=theme)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        app.clear_notifications()
        await pilot.pause()
        keys = list(app.query_one(PanelFooter).query(FooterKey))
        after = app.export_screenshot()
    (widgets_then, first), *_ = at_first_screen
    assert widgets_then == 0  # drawn as text
    assert [k.description for k in keys][:3] == ["Quit", "Help", "Launch"]  # the key widgets now
    assert last_row(first) == last_row(after)
    assert "Quit" in "".join(ch for ch, _, _ in last_row(first).values())

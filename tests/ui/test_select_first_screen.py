"""The first screen's selects (the dtype row) draw their value and arrow as text; their parts (the
current value's statics, the option list) are mounted once the screen is full. Both draw the
same cells, and the select then opens and picks as Textual's does."""

from __future__ import annotations

import re

import pytest
from textual.widgets import Select
from textual.widgets._select import SelectCurrent, SelectOverlay

from sparktui.ui.app import SparkApp
from sparktui.ui.panes import MemoryPane, ServerPane
from sparktui.ui.widgets.formselect import FormSelect
from tests.support.app import SampleBackend, settled
from tests.ui.test_footer_first_screen import last_row

pytestmark = pytest.mark.usefixtures("isolated")


def row_of(svg: str, y: int) -> dict[int, tuple[str, str, str]]:
    """Row `y` of a screenshot, cell by cell: the screenshot without the rows below it."""
    below = 20 + 24.4 * y + 0.1

    def keep(line: str) -> bool:
        found = re.search(r'<text [^>]*y="([\d.]+)"', line)
        return found is None or float(found.group(1)) <= below

    return last_row("\n".join(line for line in svg.split("\n") if keep(line)))


async def settled_select(monkeypatch, size, parts: bool):
    """The settled screen's dtype select: (its cells, whether it had parts at the first screen, the app's
    pilot-driven check that it opens). With `parts` False it stays drawn as text."""
    monkeypatch.setattr(ServerPane, "POLL_S", 3600.0)
    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)
    at_first_screen: list[int] = []
    as_widgets = FormSelect.as_widgets

    def recording(select: FormSelect) -> None:
        at_first_screen.append(len(select.query(SelectCurrent)))
        if parts:
            as_widgets(select)

    monkeypatch.setattr(FormSelect, "as_widgets", recording)
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        app.clear_notifications()
        app.set_focus(None)
        await pilot.pause()
        select = app.query_one("#flag-dtype", FormSelect)
        region = select.region
        cells = {x: c for x, c in row_of(app.export_screenshot(), region.y).items() if region.x <= x < region.right}
        if parts:  # it works as Textual's Select: Enter opens it, a choice is taken
            assert select.query(SelectCurrent) and select.query(SelectOverlay)
            select.focus()
            await pilot.press("enter")
            assert select.expanded
            await pilot.press("down", "enter")
            await pilot.pause()
            assert not select.expanded and select.value not in (Select.NULL, "auto")
    monkeypatch.setattr(FormSelect, "as_widgets", as_widgets)
    return cells, at_first_screen


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_the_first_screens_select_is_text_drawn_as_its_parts_draw_it(monkeypatch, size):
    drawn, at_first = await settled_select(monkeypatch, size, parts=True)
    assert at_first[0] == 0  # no parts when the first screen was up (a later call finds them)
    as_text, _ = await settled_select(monkeypatch, size, parts=False)
    assert "auto" in "".join(ch for ch, _, _ in as_text.values())
    assert as_text == drawn


async def test_a_key_that_opens_the_select_before_its_parts_are_mounted_opens_it(monkeypatch):
    """Enter on the select in the moment between the first screen and its parts is not lost: the
    parts are mounted then, and it opens."""
    monkeypatch.setattr(ServerPane, "POLL_S", 3600.0)
    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)
    monkeypatch.setattr(FormSelect, "as_widgets", lambda select: None)  # the moment, held open
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        select = app.query_one("#flag-dtype", FormSelect)
        assert not select.query(SelectCurrent)
        select.focus()
        await pilot.press("enter")
        await pilot.pause()
        assert select.query(SelectOverlay) and select.expanded
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not select.expanded and select.value not in (Select.NULL, "auto")

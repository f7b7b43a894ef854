"""The pane tabs at 80×24 (widgets/panetabs.py): one widget drawn as Textual's Tabs drew them
(the snapshots at 80×24 are unchanged cell for cell), and doing what they did: a click on a label
or on the bar under it shows that pane, Left and Right move between panes while the tabs have
focus (wrapping), Tab reaches them first, and Ctrl+N moves their marker."""

from __future__ import annotations

import pytest

from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.panetabs import PaneTabs
from tests.support.app import SampleBackend, settled

pytestmark = pytest.mark.usefixtures("isolated")


def shown(app: SparkApp) -> list[str]:
    return [p.id for p in app.query(".pane.-active")]


async def test_the_tabs_are_one_widget_and_switch_panes_by_click_and_keys():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        tabs = app.query_one("#pane-tabs", PaneTabs)
        assert list(tabs.children) == []  # Textual's Tabs was nine widgets
        assert app.screen.focused is tabs  # the first to take focus, as before
        assert shown(app) == ["config-pane"]
        # " 1 Config  2 Server  3 Memory  4 Bench ": a click on a label, then under one
        await pilot.click("#pane-tabs", offset=(13, 0))
        assert shown(app) == ["server-pane"] and tabs.active == "server"
        await pilot.click("#pane-tabs", offset=(24, 1))
        await pilot.pause()
        assert shown(app) == ["memory-pane"] and tabs.active == "memory"
        tabs.focus()
        await pilot.press("right")
        assert shown(app) == ["bench-pane"]
        await pilot.press("right")  # past the last: the first
        assert shown(app) == ["config-pane"]
        await pilot.press("left")
        assert shown(app) == ["bench-pane"]
        await pilot.press("ctrl+n")
        assert shown(app) == ["config-pane"] and tabs.active == "config"

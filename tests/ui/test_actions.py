"""One action registry: the bindings, the palette, the help and the README come from it."""

from __future__ import annotations

import re

import pytest

from sparktui.ui.actions import ACTIONS, key_label, readme_table
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import HelpScreen
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import ServerInfo
from tests.support import REPO
from tests.support.app import SampleBackend, settled, widget

pytestmark = pytest.mark.usefixtures("isolated")


def test_the_readme_key_table_is_the_registrys():
    readme = (REPO / "README.md").read_text()
    table = re.search(r"\| Key \| Action \| Binding id \|\n(?:\|.*\|\n?)+", readme)
    assert table is not None, "README.md lost its key table"
    assert table.group(0).strip() == readme_table(), (
        "README.md's key table is out of step with sparktui/ui/actions.py; paste in "
        "`python -c 'from sparktui.ui.actions import readme_table; print(readme_table())'`"
    )


def test_every_action_is_bound_once_where_it_belongs():
    ids = [a.id for a in ACTIONS]
    assert len(ids) == len(set(ids))
    app_ids = {b.id for b in SparkApp.BINDINGS}
    log_ids = {b.id for b in LogView.BINDINGS}
    assert app_ids | log_ids == set(ids) and not app_ids & log_ids
    assert key_label("ctrl+o") == "Ctrl+O" and key_label("f5") == "F5" and key_label("f") == "f"


async def test_a_remapped_key_shows_everywhere(isolated):
    (isolated / "config").mkdir(parents=True, exist_ok=True)
    (isolated / "config" / "config.toml").write_text('[keys]\n"server.launch" = "ctrl+l"\n')
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        # the footer
        footer_keys = {
            binding.key for _, binding, enabled, _ in app.active_bindings.values() if binding.id == "server.launch"
        }
        assert footer_keys == {"ctrl+l"}, footer_keys
        # the server pane's hint
        assert (
            "Ctrl+L launches" in widget(app, ServerInfo).view.detail
            or "vLLM cannot be started" in widget(app, ServerInfo).view.detail
        )
        # the help
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert ("Ctrl+L", "Launch the server with this configuration", "server.launch") in app.screen.rows
        await pilot.press("escape")
        # the palette
        from sparktui.ui.commands import SparkCommands

        provider = SparkCommands(app.screen)
        entries = {name: help_text for name, _, help_text in provider._commands()}
        assert entries["Launch the server with this configuration"] == "Ctrl+L"


async def test_every_pane_action_has_a_widget_that_runs_it():
    """A pane hands parts of its work to child widgets (the fit, the model actions, the log): each
    key and palette entry still finds the one widget that runs it."""
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)  # the form's later rows mounted: closing mid-mount trips Textual's Select
        for action in ACTIONS:
            pane = action.pane or ("server" if action.scope == "log" else None)
            if pane is None:
                continue
            name = action.name.split("(", 1)[0]
            owner = app.pane_widget(pane).action_owner(action.name)
            assert callable(getattr(owner, f"action_{name}", None)), (action.id, owner)

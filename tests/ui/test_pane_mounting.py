"""A pane hidden at the start (80x24 shows one at a time) mounts its widgets later: when shown, or
once the first full screen is up. The app may be closing by then."""

from __future__ import annotations

import pytest

from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.server import ServerInfo
from tests.support.app import SampleBackend, server_pane

pytestmark = pytest.mark.usefixtures("isolated")


async def test_a_hidden_pane_asked_to_mount_as_it_is_removed_draws_nothing(monkeypatch):
    # The first screen held back (a loaded box): the server pane's widgets are still to mount when
    # the app closes. Its background start then ran into NoMatches drawing a ServerInfo never mounted.
    monkeypatch.setattr(SparkApp, "on_first_screen", lambda self, message: None)
    monkeypatch.setattr(SparkApp, "FIRST_SCREEN_WAIT_S", 3600.0)
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = server_pane(app)
        assert not pane.query(ServerInfo)  # hidden: not mounted yet
        removing = pane.remove()  # as the app's exit prunes its screen
        await pane.mounted()
        await removing
        assert not pane.query(ServerInfo)


async def test_a_hidden_pane_shown_mounts_and_draws_its_widgets():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = server_pane(app)
        app.show_pane("server")
        await pane.mounted()
        await pilot.pause()
        assert pane.query_one(ServerInfo).view.detail  # drawn once mounted (what F5 would launch, or why not)

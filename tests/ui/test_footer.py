"""The key bar is rebuilt only when the keys it shows change: Textual's Footer rebuilt every key
(a widget each, styled and laid out) on each focus move, three times before the first screen."""

from __future__ import annotations

import pytest
from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.logview import LogView
from tests.support.app import SampleBackend, settled

pytestmark = pytest.mark.usefixtures("isolated")


def footer_keys(app) -> list[FooterKey]:
    return list(app.query_one(Footer).query(FooterKey))


def labels(app) -> list[str]:
    return [key.description for key in footer_keys(app)]


async def test_a_focus_move_that_changes_no_key_keeps_the_footer():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(160, 40)) as pilot:
        await settled(pilot)
        app.query_one("#flag-model").focus()
        await settled(pilot)
        before = footer_keys(app)
        assert "Launch" in labels(app)
        app.query_one("#flag-served_model_name").focus()
        await settled(pilot)
        assert footer_keys(app) == before, "the footer was rebuilt for the same keys"

        # a focus move that does change the keys: the log's own keys come in, and go again
        app.query_one(LogView).focus()
        await settled(pilot)
        assert "Follow" in labels(app)
        app.query_one("#flag-model").focus()
        await settled(pilot)
        assert "Follow" not in labels(app)
        assert "Launch" in labels(app)

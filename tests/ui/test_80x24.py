"""Nothing cut at 80×24: the header, the profile line and the help (issue 23, item 9)."""

from __future__ import annotations

import re
import shutil

import pytest
from textual.widgets import Input

from sparktui.core.profiles import shipped_profiles_dir
from sparktui.ui.actions import ACTIONS
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import HelpScreen
from tests.support.app import SampleBackend, screen_text, settled


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


LONG = "35b-moe-single-user-long-context-for-the-whole-team"


@pytest.fixture
def long_profile(isolated):
    folder = isolated / "config" / "profiles"
    folder.mkdir(parents=True)
    path = folder / f"{LONG}.toml"
    shutil.copy(shipped_profiles_dir() / "35b-moe-single-user-long-context.toml", path)
    return str(path)


async def test_the_header_keeps_the_profile_and_the_memory_at_80_columns(long_profile):
    app = SparkApp(profile=long_profile, backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        app.query_one("#flag-max_num_seqs", Input).value = "3"
        await settled(pilot)
        header = screen_text(app)[0]
        assert "112.4G" in header, header  # not "avail 11…"
        assert "35b-moe-" in header and "(modified)" in header, header
        assert "armed" in header and "stopped" in header, header


async def test_the_profile_line_is_not_cut_at_80_columns(long_profile):
    app = SparkApp(profile=long_profile, backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        app.query_one("#flag-max_num_seqs", Input).value = "3"
        await settled(pilot)
        text = " ".join(screen_text(app)[:8])
        assert "(121.7 on some)" in text, screen_text(app)[:8]  # the machine line's end


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_help_keeps_binding_ids_apart_from_wrapped_text(size):
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        await pilot.press("f1")
        await settled(pilot)
        assert isinstance(app.screen, HelpScreen)
        from rich.console import Console

        width = app.screen.query_one("#help-table").content_size.width
        console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(app.screen.table)
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        text = text[: text.index("Remap keys")]
        for action in ACTIONS:
            # each id on the screen as a word of its own, never glued to the description before it
            assert re.search(rf"(^|[\s│]){re.escape(action.id)}(\s|│|$)", text, re.M), (action.id, text)
            assert not re.search(rf"[^\s│]{re.escape(action.id)}", text), (action.id, text)

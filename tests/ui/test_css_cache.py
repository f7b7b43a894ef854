"""The stylesheet's parsed rules are kept from one start to the next (ui/css_cache.py): a second
start parses no CSS for its first screen, and draws exactly what a start that parsed it all does."""

from __future__ import annotations

import os

import pytest
import textual.css.stylesheet as stylesheet_module

from sparktui.paths import cache_dir
from sparktui.ui.app import SparkApp
from sparktui.ui.panes import MemoryPane, ServerPane
from tests.support.app import SampleBackend, screen_text, settled

pytestmark = pytest.mark.usefixtures("isolated")


@pytest.fixture(autouse=True)
def still(monkeypatch):
    """The polls slowed, so that two starts' screens differ only by what the cache changes (the
    gauge's history grows with each memory sample)."""
    monkeypatch.setattr(ServerPane, "POLL_S", 3600.0)
    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)


async def first_screen(monkeypatch, size=(80, 24)) -> tuple[str, int]:
    """One start of the panel: its settled screen (SVG) and how many CSS sources it parsed before
    its first screen was drawn."""
    parses = [0]
    parse = stylesheet_module.parse
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())

    def counting_parse(*args, **kwargs):
        if app.holding_first_screen:
            parses[0] += 1
        return parse(*args, **kwargs)

    monkeypatch.setattr(stylesheet_module, "parse", counting_parse)
    async with app.run_test(size=size) as pilot:
        await settled(pilot)
        screen = app.export_screenshot()
        text = "\n".join(screen_text(app))
    monkeypatch.setattr(stylesheet_module, "parse", parse)
    return screen, text, parses[0]


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_a_second_start_parses_no_css_and_draws_the_same(monkeypatch, size):
    first, first_text, parsed_first = await first_screen(monkeypatch, size)
    assert parsed_first > 10  # sparktui's stylesheet and each widget's DEFAULT_CSS
    assert list(cache_dir().glob("css-rules-*.pickle")), "nothing kept for the next start"
    second, second_text, parsed_second = await first_screen(monkeypatch, size)
    assert parsed_second == 0
    assert second_text == first_text
    assert second == first


async def test_a_damaged_or_foreign_cache_file_is_parsed_past(monkeypatch):
    """A file cut short, or not the cache's at all, only means parsing as before."""
    first, _, _ = await first_screen(monkeypatch)
    (path,) = cache_dir().glob("css-rules-*.pickle")
    whole = path.read_bytes()
    for damaged in (whole[: len(whole) // 2], b"not a pickle", b"\x80\x05N."):  # the last: None
        path.write_bytes(damaged)
        screen, _, parsed = await first_screen(monkeypatch)
        assert parsed > 10
        assert screen == first


@pytest.mark.parametrize("how", ["others_may_write", "folder_others_may_write", "another_owner", "a_symlink"])
async def test_a_cache_file_not_the_users_own_is_never_unpickled(monkeypatch, how):
    """The file is a pickle, which runs code as it loads: one that anybody else could have written or
    swapped in is parsed past, as if it were missing."""
    first, _, _ = await first_screen(monkeypatch)
    (path,) = cache_dir().glob("css-rules-*.pickle")
    if how == "others_may_write":
        path.chmod(0o666)
    elif how == "folder_others_may_write":
        path.parent.chmod(0o777)
    elif how == "another_owner":
        os.chown(path, 65534, -1)
    else:
        real = path.with_name("elsewhere.pickle")
        path.rename(real)
        path.symlink_to(real)
    try:
        screen, _, parsed = await first_screen(monkeypatch)
    finally:
        path.parent.chmod(0o700)
    assert parsed > 10
    assert screen == first

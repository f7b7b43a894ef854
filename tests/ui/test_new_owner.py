"""The rough edges a new owner met in the panel (issue 23), each driven with Pilot."""

from __future__ import annotations

import re

import pytest
from textual import events
from textual.widgets import Input

from sparktui.core.profiles import load_profile, shipped_profiles_dir
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import ChoiceScreen, ConfirmScreen, PromptScreen
from sparktui.ui.widgets.fitpanel import FitPanel
from tests.support.app import SampleBackend, config_pane, record_notices, settled


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def edit(pilot, field: str, value: str) -> None:
    pilot.app.query_one(f"#flag-{field}", Input).value = value
    await settled(pilot)


async def test_ctrl_s_on_a_shipped_profile_writes_a_copy_among_the_users_and_says_where(isolated):
    shipped = shipped_profiles_dir() / "70b-dense-5-users.toml"
    before = shipped.read_bytes()
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await edit(pilot, "max_num_seqs", "7")
        await pilot.press("ctrl+s")
        await settled(pilot)
        copy = isolated / "config" / "profiles" / "70b-dense-5-users.toml"
        assert shipped.read_bytes() == before
        assert load_profile(copy).serve.max_num_seqs == 7
        assert any(str(copy) in n and "read-only" in n for n in notices(app)), notices(app)
        # the shipped notes describe the shipped settings: the copy says where it came from instead
        assert copy.read_text().splitlines()[0].startswith("# 70b-dense-5-users: saved by sparktui from ")
        assert "five users at 8K" not in copy.read_text()
        await edit(pilot, "max_num_seqs", "6")
        await pilot.press("ctrl+s")  # now the user's own file: saved in place
        await settled(pilot)
        assert load_profile(copy).serve.max_num_seqs == 6 and shipped.read_bytes() == before


async def test_save_as_does_not_copy_the_old_profiles_header_comments(isolated):
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f2")
        await settled(pilot)
        app.screen.query_one(Input).value = "gemma-test"
        await pilot.press("enter")
        await settled(pilot)
        text = (isolated / "config" / "profiles" / "gemma-test.toml").read_text()
        assert "five users at 8K" not in text and text.startswith("# gemma-test: saved by sparktui from ")


async def test_ctrl_o_asks_before_discarding_unsaved_edits():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await edit(pilot, "max_num_seqs", "7")
        await pilot.press("ctrl+o")
        await settled(pilot)
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settled(pilot)
        assert not isinstance(app.screen, (ConfirmScreen, ChoiceScreen))
        assert config_pane(app).form.config.max_num_seqs == 7
        await pilot.press("ctrl+o")
        await settled(pilot)
        await pilot.press("y")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)


async def test_ctrl_o_without_edits_opens_the_picker_at_once():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+o")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)


async def test_tab_into_the_model_field_does_not_select_it_so_one_key_cannot_wipe_it():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        model = app.query_one("#flag-model", Input)
        for _ in range(40):
            if app.focused is model:
                break
            await pilot.press("tab")
        assert app.focused is model
        assert model.selection.is_empty
        await pilot.press("x")
        await settled(pilot)
        assert model.value.startswith("nvidia/Llama-3.1-70B-Instruct-FP8") or model.value.endswith("FP8")
        assert len(model.value) == len("nvidia/Llama-3.1-70B-Instruct-FP8") + 1


async def test_f4_takes_a_backslash_continued_paste_over_several_lines():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f4")
        await settled(pilot)
        assert isinstance(app.screen, PromptScreen)
        field = app.screen.query_one(Input)
        field.post_message(
            events.Paste(
                "vllm serve Qwen/Qwen3-32B \\\n  --max-model-len 32768 \\\n  --kv-cache-dtype fp8 \\\n  --port 8011\n"
            )
        )
        await settled(pilot)
        await pilot.press("enter")
        await settled(pilot)
        config = config_pane(app).form.config
        assert (config.model, config.max_model_len, config.kv_cache_dtype, config.port) == (
            "Qwen/Qwen3-32B",
            32768,
            "fp8",
            8011,
        )


async def test_a_first_launch_says_model_required_once():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        fit = app.query_one(FitPanel)
        assert not any("model: required" in r for r in fit.view.reasons), fit.view.reasons
        assert any("no model yet" in r for r in fit.view.reasons)


async def test_f3_says_it_lists_the_cache_and_the_catalog():
    app = SparkApp(profile="70b-dense-5-users", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f3")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert "catalog" in app.screen.title_text


async def test_a_notice_keeps_square_brackets_and_ctrl_t_names_the_theme():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        app.notify("set [runner] executable in the profile")
        await pilot.pause()
        shown = [n for n in app._notifications if "executable" in str(n.message)]
        assert shown and not shown[0].markup
        said = record_notices(app)  # the theme's notice lasts 4 s: a loaded box can outlast it
        await pilot.press("ctrl+t")
        await settled(pilot)
        assert any(app.theme in n.message and "theme" in n.message for n in said), said


async def test_the_palette_has_no_second_theme_picker():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Theme" not in titles and "Quit" in titles


async def test_every_speed_figure_says_its_context_and_users():
    """F12 and the fit panel predicted 17 and 28 tok/s for one model: each now says for what."""
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert re.search(r"tok/s \(\d+–\d+\) 1 user at [\d,k]+ ctx", app.fit.speed), app.fit.speed
        await pilot.press("f12")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert "tok/s (1 user at 32,768 ctx)" in app.screen.options[0][0], app.screen.options[0][0]

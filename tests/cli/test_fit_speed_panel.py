"""The panel's speed line and `sparktui fit`'s speed section give the same figure for the same
inputs: both take it from core.fit_speed and only render it."""

from __future__ import annotations

import json
import re

import pytest

from sparktui import paths
from sparktui.cli import main
from sparktui.core.config import parse_serve_command
from sparktui.core.modelspec import load_serving_spec
from sparktui.ui.backend import Backend
from tests.core.test_speed import history_line

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def cli_speed(capsys, flags: list[str], machine: str) -> dict:
    # exit 1 (won't start) on a small `auto` host still carries the speed section
    assert main(["fit", "--json", "--model", MODEL, "--machine", machine, *flags]) in (0, 1)
    out, _ = capsys.readouterr()
    speed = json.loads(out)["speed"]
    assert speed is not None
    return speed


def panel_speed(flags: list[str], machine: str) -> str:
    backend = Backend()
    config = parse_serve_command(["vllm", "serve", MODEL, *flags])
    spec = load_serving_spec(config.model, config.speculation)
    return backend.fit(config, spec, backend.machine(machine), None).speed or ""


def same_figure(cli: dict, panel: str) -> None:
    """The panel's "≈N tok/s … 1 user at C ctx" is the CLI's one-user figure at the CLI's context."""
    found = re.match(r"≈(\d+) tok/s \(\d+–\d+\) 1 user at ([\d,k]+) ctx", panel)
    assert found, panel
    context = f"{cli['context'] // 1024}k" if cli["context"] % 1024 == 0 else f"{cli['context']:,}"
    assert (int(found[1]), found[2]) == (round(cli["decode_tok_s"]), context), (cli, panel)
    assert ("calibrated" in panel) == (cli["calibration"] is not None), (cli, panel)


def test_max_model_len_auto_is_predicted_at_the_same_context(capsys, isolated):
    # --max-model-len -1: the panel took -1 for the length and predicted at a 1-token context
    flags = ["--max-model-len", "-1"]
    cli = cli_speed(capsys, flags, "dgx-spark")
    assert cli["context"] == 1024
    same_figure(cli, panel_speed(flags, "dgx-spark"))


@pytest.mark.parametrize("version", ["0.19.1", "0.32.0"])
def test_bench_history_calibrates_only_the_vllm_version_it_measured(capsys, isolated, monkeypatch, version):
    # a run measured on 0.32.0: the panel calibrated a 0.19.1 fit with it, the CLI did not
    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "273")  # `auto` is this host, not a Spark
    history = paths.bench_history_path()
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text(history_line(model=MODEL, version="0.32.0", decode=2.0) + "\n")
    flags = ["--vllm-version", version]
    cli = cli_speed(capsys, flags, "auto")
    assert (cli["calibration"] is not None) == (version == "0.32.0")
    same_figure(cli, panel_speed(flags, "auto"))


def test_a_bad_bandwidth_in_the_environment_is_named_by_both(capsys, isolated, monkeypatch):
    # the CLI refused it as "--bandwidth"; the panel showed the Spark's figure as if it were unset
    monkeypatch.setenv("SPARKTUI_BANDWIDTH_GBS", "fast")
    assert main(["fit", "--model", MODEL]) == 2
    assert "SPARKTUI_BANDWIDTH_GBS: got 'fast'" in capsys.readouterr().err
    panel = panel_speed([], "dgx-spark")
    assert "speed not predicted" in panel and "SPARKTUI_BANDWIDTH_GBS: got 'fast'" in panel


def test_the_speed_is_predicted_on_the_weights_as_served(capsys, isolated):
    # --dtype float32 doubles the bytes each decode step reads: the fit's own figure (the launch
    # record's) read them so, while `sparktui fit` and the panel re-predicted on the bf16 checkpoint
    flags = ["--dtype", "float32"]
    config = parse_serve_command(["vllm", "serve", MODEL, *flags])
    spec = load_serving_spec(config.model, config.speculation)
    from sparktui.core.fit import fit
    from sparktui.core.machine import dgx_spark

    own = fit(config, spec, dgx_spark()).speed
    assert own is not None
    cli = cli_speed(capsys, flags, "dgx-spark")
    assert round(cli["decode_tok_s"], 1) == round(own.decode_tok_s, 1)
    same_figure(cli, panel_speed(flags, "dgx-spark"))


def test_the_panel_estimates_the_speed_once_per_fit(isolated, speed_estimates):
    # core's plain figure was estimated, then thrown away for the speed line's own
    assert panel_speed([], "dgx-spark").startswith("≈")
    assert len(speed_estimates) == 1, speed_estimates


def test_sparktui_fit_estimates_the_speed_once(capsys, isolated, speed_estimates):
    cli = cli_speed(capsys, ["--context", "4096"], "dgx-spark")
    assert speed_estimates == [cli["context"]] == [4096]  # the one --context asks for, not a second at 1,024

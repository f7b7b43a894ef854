"""The fit panel marks each budget term measured (a launch on this box), calibrated (a log) or
predicted, as `sparktui fit` does per row and `fit --json` in kv_memory_source."""

from __future__ import annotations

import pytest

from sparktui.core.calibration import Calibration
from sparktui.core.fit_key import calibration_key
from sparktui.core.machine import dgx_spark
from sparktui.core.modelspec import load_model_spec
from sparktui.core.profiles import load_profile
from sparktui.runtime import calibrations
from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.fitpanel import FitPanel
from tests.support.app import SampleBackend, settled, widget

GiB = 2**30
PROFILE = "70b-dense-single-user"


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def record_weights_only() -> None:
    """A launch of the profile's model on this box whose weights still apply; the activation and
    graph terms were measured under other flags (another --max-num-batched-tokens), so they do not."""
    serve = load_profile(PROFILE).serve
    key = calibration_key(serve, load_model_spec(serve.model), dgx_spark())
    flags = {term: dict(f) for term, f in key.flags.items()}
    for term in ("activation_non_torch", "cuda_graphs"):
        flags[term] = {**flags[term], "max_num_batched_tokens": "16384"}
    figures = {
        "weights": int(67.72 * GiB),
        "activation_non_torch": 5 * GiB,
        "cuda_graphs": GiB,
        "kv_memory": 20 * GiB,
        "requested": int(101.7 * GiB),
    }
    calibrations.record(Calibration(key.model, key.vllm_version, key.machine, figures, flags, "measured", "2026-12-01"))


async def test_the_panel_marks_the_measured_term_and_the_predicted_ones():
    record_weights_only()
    app = SparkApp(profile=PROFILE, backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        text = widget(app, FitPanel).render().plain
        assert "weights 67.7 measured" in text
        assert "predicted" in text.split("act ", 1)[1].split("graphs", 1)[0]
        assert "graphs" in text and text.split("graphs ", 1)[1].split(" ", 2)[1] == "predicted"
        assert "every term predicted" not in text


async def test_without_a_launch_the_panel_says_every_term_is_predicted():
    app = SparkApp(profile=PROFILE, backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        text = widget(app, FitPanel).render().plain
        assert "every term predicted" in text and "measured" not in text

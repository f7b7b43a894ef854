"""The fit panel shows the profile's fit once it is in the form, and one fit per form edit: no
"error: fill in the model" first while the profile's form is still being filled."""

from __future__ import annotations

import pytest
from textual.widgets import Input

from sparktui.core import fit as fit_module
from sparktui.ui.app import SparkApp
from sparktui.ui.panes.config_fit import FitBox
from tests.support.app import SampleBackend, settled


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


@pytest.fixture
def seen(monkeypatch) -> list[str]:
    """Each core fit ("fit") and each view the fit panel was given ("shown <verdict>"), in order."""
    events: list[str] = []
    real_fit, real_show = fit_module.fit, FitBox._show_fit

    def counted_fit(*args, **kwargs):
        events.append("fit")
        return real_fit(*args, **kwargs)

    def counted_show(self, view, saw_sample):
        events.append(f"shown {view.verdict}")
        return real_show(self, view, saw_sample)

    monkeypatch.setattr(fit_module, "fit", counted_fit)
    monkeypatch.setattr(FitBox, "_show_fit", counted_show)
    return events


async def test_a_profile_is_fitted_once_and_shown_once_at_the_start(seen):
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert seen == ["fit", "shown fits"]


async def test_one_form_edit_is_one_fit(seen):
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        seen.clear()
        app.query_one("#flag-max_model_len", Input).value = "16384"
        await settled(pilot)
        assert seen == ["fit", "shown fits"]


async def test_without_a_profile_the_empty_form_says_so_once(seen):
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        assert seen == ["shown n/a"]


async def test_one_form_edit_estimates_the_speed_once(speed_estimates):
    # core's plain figure was estimated for each edit, then replaced by the speed line's own
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settled(pilot)
        speed_estimates.clear()
        app.query_one("#flag-max_model_len", Input).value = "16384"
        await settled(pilot)
        assert len(speed_estimates) == 1, speed_estimates
        assert "tok/s" in (app.query_one(FitBox).fit.speed or "")  # the one estimate is shown

"""SVG snapshots of the main screen at 80×24 and 120×40 in each shipped theme.

Deterministic: fixed machine readings (tests/support/app.py), a fixed MemAvailable history, the
polls slowed so nothing changes while the picture is taken, no clock and no real host name.
Update after an intended change with: pytest tests/test_app_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from sparktui.ui.app import SparkApp
from tests.support.app import SampleBackend

HISTORY_GIB = [112.4, 112.3, 111.9, 104.2, 88.7, 71.5, 52.3, 38.9, 36.2, 36.0, 35.8, 35.9]


class SnapshotApp(SparkApp):
    MEMORY_INTERVAL_S = SERVER_INTERVAL_S = METRICS_INTERVAL_S = 3600.0


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # the same "vLLM not found" note everywhere
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))


async def prepare(pilot):
    app = pilot.app
    for _ in range(200):  # profile → form → model spec → fit: a chain of workers and messages
        await app.workers.wait_for_complete()
        await pilot.pause()
        settled = app.fit_view.verdict not in ("n/a", "error") and app.w.gauge.sample is not None
        if settled and app.runner_problem is not None:
            break
    else:
        raise AssertionError(f"the fit never settled: {app.fit_view}")
    gauge = app.w.gauge
    gauge.history.clear()
    gauge.history.extend(HISTORY_GIB)
    gauge.refresh()
    app.set_focus(None)  # no blinking cursor in the picture
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    gauge = pilot.app.w.gauge
    gauge.history.clear()
    gauge.history.extend(HISTORY_GIB)
    gauge.refresh()
    pilot.app.set_focus(None)
    await pilot.pause()


@pytest.mark.parametrize("theme", ["sparktui-dark", "sparktui-light", "sparktui-contrast"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_main_screen(snap_compare, theme, size):
    app = SnapshotApp(profile="70b-dense-single-user", theme_name=theme, backend=SampleBackend())
    assert snap_compare(app, terminal_size=size, run_before=prepare)

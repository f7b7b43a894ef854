"""An idle panel does only what its screen needs: a memory sample that cannot change the fit
does not refit it (a refit redraws the fit panel, the server pane and the status bar)."""

from __future__ import annotations

import pytest

from sparktui.core.units import GiB
from sparktui.ui import messages as msg
from sparktui.ui.app import SparkApp
from tests.support.app import SampleBackend, fit_box, sample, workers_done

pytestmark = pytest.mark.usefixtures("isolated")


class CountingBackend(SampleBackend):
    fits = 0

    def fit(self, *args, **kwargs):
        self.fits += 1
        return super().fit(*args, **kwargs)


async def fitted(pilot, backend) -> int:
    app = pilot.app
    for _ in range(200):
        await workers_done(app)
        await pilot.pause(0.05)
        if app.fit is not None and app.fit.verdict not in ("n/a", "error") and fit_box(app).fit_saw_sample:
            return backend.fits
    raise AssertionError(f"the fit never settled: {app.fit}")


async def feed(pilot, **reading) -> None:
    pilot.app.post_message(msg.MemorySampled(sample(**reading)))
    await pilot.pause()
    await pilot.pause()


@pytest.mark.parametrize(
    ("host_total_gib", "refits"),
    [(31.0, 0), (121.7, 1)],
    ids=["a laptop: the Spark profile leaves its reading out", "a Spark: its reading is used"],
)
async def test_a_sample_refits_only_a_fit_that_uses_it(monkeypatch, host_total_gib, refits):
    from sparktui.ui.panes import MemoryPane

    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)  # only the samples the test feeds (one on mount)
    backend = CountingBackend(memory=sample(mem_total=int(host_total_gib * GiB), mem_available=int(20 * GiB)))
    app = SparkApp(profile="70b-dense-single-user", backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        before = await fitted(pilot, backend)
        await feed(pilot, mem_total=int(host_total_gib * GiB), mem_available=int(20 * GiB) + 10 * 2**20)  # jitter
        assert backend.fits == before
        await feed(pilot, mem_total=int(host_total_gib * GiB), mem_available=int(18 * GiB))  # a real move
        assert backend.fits == before + refits
        assert app.fit.mem_available_live == bool(refits)


async def test_at_idle_the_polls_start_no_worker_and_the_gauge_stays_fresh(monkeypatch):
    """The memory poll runs in one thread for the pane's life (a worker a tick was most of the
    idle CPU); its readings still reach the gauge and the status bar each tick."""
    from sparktui.ui.app import StatusBar
    from sparktui.ui.panes import MemoryPane, ServerPane
    from sparktui.ui.widgets.gauge import MemoryGauge
    from tests.support.app import until, widget

    monkeypatch.setattr(MemoryPane, "POLL_S", 0.05)
    monkeypatch.setattr(ServerPane, "POLL_S", 0.05)
    backend = CountingBackend(memory=sample(mem_available=int(20 * GiB)))
    app = SparkApp(profile="70b-dense-single-user", backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await fitted(pilot, backend)
        pane = app.query_one(ServerPane)
        await until(pilot, lambda: app.background_started and pane.roster.watching, "the polls and the watch")
        await pilot.pause(0.3)
        started: list[str] = []
        add_worker = app.workers.add_worker

        def counting(worker, *args, **kwargs):
            started.append(worker.name)
            return add_worker(worker, *args, **kwargs)

        monkeypatch.setattr(app.workers, "add_worker", counting)
        await pilot.pause(1.0)  # some 20 ticks of each poll
        assert started == [], f"workers started at idle: {started}"
        backend.memory_sample = sample(mem_available=int(17.5 * GiB))
        gauge = widget(app, MemoryGauge)
        await until(pilot, lambda: "MemAvailable  17.5 GiB" in gauge.render().plain, "the new reading in the gauge")
        await until(pilot, lambda: "avail 17.5" in widget(app, StatusBar).text.plain, "the new reading in the bar")

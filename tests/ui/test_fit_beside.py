"""ui.backend.beside_others: the fit panel counts the other servers' reservations as preflight does
(core.pool), from the recorded reservation or, for an older record, its --gpu-memory-utilization."""

from __future__ import annotations

from types import SimpleNamespace

from sparktui.core import pool
from sparktui.core.config import ServeConfig
from sparktui.core.fit import dgx_spark
from sparktui.runtime.records.protocol import Condition, ConditionView
from sparktui.ui.backend import beside_others
from sparktui.ui.viewmodels import FitView, ServerEntry

GiB = 2**30
READY = ConditionView(condition=Condition.READY)


def fit_view() -> FitView:
    return FitView(
        "fits", ["the model fits"], segments=[("weights", "weights", 40 * GiB), ("os", "OS keeps", 30 * GiB)]
    )


def test_an_old_record_is_counted_from_its_utilization_and_the_launch_would_not_fit():
    machine = dgx_spark()
    other = ServerEntry(port=8001, profile="embed", condition=READY, utilization=0.5)  # no reservation recorded
    view = fit_view()
    beside_others(
        view, SimpleNamespace(budget={}), ServeConfig(model="m", gpu_memory_utilization=0.6), machine, [other]
    )
    counted, _ = pool.reserved_bytes(machine, 0.5)
    assert view.verdict == "wont_start" and view.others_bytes == counted
    assert view.reasons[0].startswith(f"won't fit beside :8001 (reserves {counted / GiB:.1f} GiB): this one reserves")
    assert "stop :8001" in view.reasons[0]
    assert view.segments[-2:] == [("others", "other servers", counted), ("os", "OS keeps", max(0, 30 * GiB - counted))]


def test_beside_a_small_server_it_fits_and_says_beside_what():
    other = ServerEntry(port=8001, profile="embed", condition=READY, reserved_bytes=10 * GiB, priority=3)
    view = fit_view()
    beside_others(
        view, SimpleNamespace(budget={}), ServeConfig(model="m", gpu_memory_utilization=0.5), dgx_spark(), [other]
    )
    assert view.verdict == "fits"
    assert view.reasons[-1].startswith("beside :8001 (reserves 10.0 GiB): this one reserves")


def test_an_unsafe_verdict_stays_unsafe():
    other = ServerEntry(port=8001, profile="embed", condition=READY, reserved_bytes=100 * GiB)
    view = fit_view()
    view.verdict = "unsafe"
    beside_others(
        view, SimpleNamespace(budget={}), ServeConfig(model="m", gpu_memory_utilization=0.5), dgx_spark(), [other]
    )
    assert view.verdict == "unsafe" and view.reasons[0].startswith("won't fit beside :8001")

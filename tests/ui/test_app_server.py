"""The launch pane against the stub vLLM, through the real supervisor: launch → phases → ready →
metrics; stop; kill now (one confirmation); attach to a server started elsewhere; failure card."""

from __future__ import annotations

import pytest

from sparktui.runtime.host import proc
from sparktui.runtime.records import state as st
from sparktui.ui.app import SparkApp
from sparktui.ui.screens import ConfirmScreen
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard, PhaseStrip, ServerInfo
from tests.support.app import SampleBackend, config_pane, record_notices, server_pane, widget
from tests.support.app import until as wait_until

pytestmark = [pytest.mark.usefixtures("isolated"), pytest.mark.slow]


async def until(pilot, condition, what: str, timeout: float = 30.0):
    """Let the app run until condition() holds (the workers post as the server moves on)."""
    detail = lambda app: f"server={app.server!r} phase={widget(app, PhaseStrip).phase!r}"  # noqa: E731
    await wait_until(pilot, condition, what, timeout, detail)


async def test_launch_phases_ready_metrics_then_stop(make_profile, fixtures):
    app = SparkApp(profile=make_profile(), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        seen = set()  # every phase the strip is given (polling it can miss the short ones)
        strip_set_phase = widget(app, PhaseStrip).set_phase
        widget(app, PhaseStrip).set_phase = lambda phase, reached=None: (
            (phase and seen.add(phase)) or strip_set_phase(phase, reached)
        )
        await pilot.press("f5")
        await until(pilot, lambda: app.server is not None and app.server.state in ("starting", "ready"), "a launch")
        assert app.pane == "server"
        await until(pilot, lambda: widget(app, PhaseStrip).phase == "ready", "phase ready")
        await until(pilot, lambda: app.server.state == "ready", "the supervisor to say ready")
        assert "ready" in seen and len(seen) >= 2, seen
        actual = dict(widget(app, ServerInfo).view.actual)
        assert actual["KV tokens"] == "131,072"  # what the fixture's vLLM printed
        await until(pilot, lambda: dict(widget(app, ServerInfo).view.metrics).get("KV", "n/a") != "n/a", "live metrics")
        figures = dict(widget(app, ServerInfo).view.metrics)
        assert {"KV", "run", "wait", "gen", "TTFT p50"} <= set(figures)
        log_lines = widget(app, LogView).lines()
        assert any("Application startup complete." in line for line in log_lines)
        assert (
            widget(app, MemoryGauge).tree_procs and widget(app, MemoryGauge).tree_procs >= 2
        )  # API server + EngineCore
        state = st.read_state(st.state_path(app.server.port))
        members = [proc.ProcessIdentity(p, s) for p, s in state.tree.members]
        await pilot.press("f6")
        await until(pilot, lambda: app.server.state == "stopped", "the stop")
        assert not any(m.is_alive() for m in members)
        assert widget(app, PhaseStrip).phase != "failed"


async def test_kill_now_asks_once_then_kills_the_tree(make_profile):
    app = SparkApp(profile=make_profile(), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        await pilot.press("f5")
        await until(pilot, lambda: app.server is not None and app.server.state == "ready", "ready")
        state = st.read_state(st.state_path(app.server.port))
        members = [proc.ProcessIdentity(p, s) for p, s in state.tree.members]
        await pilot.press("f8")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # changed my mind: nothing happens
        await pilot.pause(0.5)
        assert app.server.state == "ready"
        await pilot.press("f8")
        await pilot.pause()
        await pilot.press("y")
        await until(pilot, lambda: app.server.condition.reason == "killed", "the kill")
        assert not any(m.is_alive() for m in members)


async def test_a_failed_start_shows_the_phase_and_the_diagnosis(make_profile, fixtures):
    failing = fixtures / "vllm-cpu" / "startup_FAIL_default_kv_memutil.log"
    app = SparkApp(profile=make_profile(STUB_VLLM_LOG=str(failing)), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        await pilot.press("f5")
        await until(pilot, lambda: widget(app, DiagnosisCard).diagnosis is not None, "the diagnosis card")
        await until(pilot, lambda: app.server is not None and app.server.state == "failed", "failed state")
        assert widget(app, PhaseStrip).phase == "failed"
        d = widget(app, DiagnosisCard).diagnosis
        assert d.kind and d.message and d.hint
        assert widget(app, DiagnosisCard).display


async def test_a_worker_that_dies_after_ready_gets_a_diagnosis_card(make_profile):
    """vLLM's worker dies while serving and the API server exits 0: not "Server stopped", a failure."""
    app = SparkApp(profile=make_profile(STUB_VLLM_WORKER_DIES_AFTER_S="1.5"), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        await pilot.press("f5")
        await until(pilot, lambda: widget(app, PhaseStrip).phase == "ready", "phase ready")
        await until(pilot, lambda: widget(app, DiagnosisCard).diagnosis is not None, "the diagnosis card")
        await until(pilot, lambda: app.server is not None and app.server.state == "failed", "failed state")
        d = widget(app, DiagnosisCard).diagnosis
        assert d.kind == "worker_died" and "SIGILL" in d.message and d.hint
        assert widget(app, DiagnosisCard).display


async def test_attaches_to_a_server_already_running(make_profile):
    from sparktui.core.profiles import load_profile
    from sparktui.runtime.server import launcher

    profile = load_profile(make_profile())
    launcher.launch(profile)  # as `sparktui serve --detach` would, before the app starts
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.state == "ready", "attaching")
        assert app.server.port == profile.serve.port
        await until(pilot, lambda: widget(app, PhaseStrip).phase == "ready", "the log replayed")
        await pilot.press("f6")
        await until(pilot, lambda: app.server.state == "stopped", "the stop")


async def test_a_guard_trip_is_shown_with_its_report(make_profile):
    from sparktui.runtime.host.memory import read_memory

    # Lines just below today's MemAvailable; the stub's EngineCore then takes up to 3 GiB at the KV
    # line (more than the 0.6 GiB margin even if other programs free some memory meanwhile).
    now = read_memory().mem_available / 2**30
    guard = (
        f"warn-below-gib = {now - 0.3:.2f}\nterm-below-gib = {now - 0.6:.2f}\n"
        f"kill-below-gib = {now - 8:.2f}\ngrace-s = 2"
    )
    app = SparkApp(
        profile=make_profile(guard=guard, STUB_VLLM_ALLOC_MIB="3072", STUB_VLLM_ALLOC_RATE_MIB_S="3000"),
        backend=SampleBackend(),
    )
    async with app.run_test(size=(120, 40)) as pilot:
        # the form can hold the profile's config a moment before the app has the profile (and the
        # guard it launches with): wait for both
        await until(pilot, lambda: config_pane(app).form.config is not None and app.profile is not None, "the profile")
        assert app.guard.state == "armed" and app.guard.line_gib()[1] == round(now - 0.6, 2)
        await pilot.press("f5")
        await until(
            pilot, lambda: app.server is not None and app.server.condition.kind == "guard", "the guard trip", 60
        )
        assert app.guard.state == "tripped"
        assert "memory guard tripped: term line" in app.guard.last_trip
        d = widget(app, DiagnosisCard).diagnosis
        assert d.kind == "memory guard trip" and "term line" in d.message and "--gpu-memory-utilization" in d.hint
        assert widget(app, MemoryGauge).guard.last_trip == app.guard.last_trip
        assert any("memory guard tripped" in str(n.message) for n in app._notifications)


async def test_a_refused_launch_says_why_in_the_launch_pane(make_profile):
    import socket

    path = make_profile()
    from sparktui.core.profiles import load_profile

    port = load_profile(path).serve.port
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen(1)
        app = SparkApp(profile=path, backend=SampleBackend())
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
            await pilot.press("f5")
            await until(pilot, lambda: server_pane(app).launch_error is not None, "the refusal")
            await pilot.pause(3.5)  # a few idle server polls later the reason is still shown
            assert app.server is None
            assert (
                f"--port {port}" in widget(app, ServerInfo).view.detail
                and "launch failed" in widget(app, ServerInfo).view.detail
            )
            assert widget(app, PhaseStrip).phase is None


async def test_a_launch_shows_its_preflight_warnings_atop_its_log_and_as_a_notice(make_profile):
    # A warn line below the default term and kill lines turns those off: the preflight says so, and
    # `sparktui serve` prints it ("sparktui: warning: guard: the default term line …").
    path = make_profile(guard="warn-below-gib = 0.5")
    app = SparkApp(profile=path, backend=SampleBackend())
    said = record_notices(app)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: config_pane(app).form.config is not None, "the profile")
        await pilot.press("f5")
        await until(pilot, lambda: app.server is not None and app.server.state == "ready", "ready")
        await until(
            pilot, lambda: any("Application startup complete." in x for x in widget(app, LogView).lines()), "the log"
        )
        lines = widget(app, LogView).lines()
        marked = [x for x in lines if x.startswith("[sparktui preflight] ")]
        assert lines[: len(marked)] == marked, lines[:8]  # at the top, before vLLM's own lines
        guard = [x for x in marked if x.startswith("[sparktui preflight] warning: guard: the default term line")]
        assert guard and "turned off" in guard[0], marked
        notices = [n for n in said if n.title.startswith("Preflight")]
        assert len(notices) == 1 and notices[0].severity == "warning"
        assert "guard: the default term line" in str(notices[0].message)
        # the log read again (as a switch back to this server does): that launch's lines, still on top
        server_pane(app).server_log.start_tail(app.server.log_path)
        await until(
            pilot, lambda: any("Application startup complete." in x for x in widget(app, LogView).lines()), "the log"
        )
        assert widget(app, LogView).lines()[: len(marked)] == marked
        await pilot.press("f6")
        await until(pilot, lambda: app.server.state == "stopped", "the stop")

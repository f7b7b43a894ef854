"""The rough edges of issue 11, one test each, against a supervisor seen through its state
record (tests/support/app.py: RecordBackend) — no processes, so each runs in a second or two."""

from __future__ import annotations

import dataclasses
from contextlib import asynccontextmanager

import pytest
from textual.geometry import Region
from textual.widgets import Input

from sparktui.core.units import GiB
from sparktui.ui.app import SparkApp
from sparktui.ui.backend import Unavailable
from sparktui.ui.screens import ChoiceScreen, ConfirmScreen, HelpScreen, PromptScreen
from sparktui.ui.widgets.fitpanel import FitPanel
from sparktui.ui.widgets.gauge import MemoryGauge
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import DiagnosisCard, LogHeader, PhaseStrip, ServerInfo
from tests.support import FIXTURES
from tests.support.app import (
    RecordBackend,
    SampleBackend,
    config_pane,
    first_screen_full,
    fit_box,
    log_drawn,
    mounted,
    sample,
    screen_text,
    server_pane,
    server_record,
    until,
    widget,
    workers_done,
)

pytestmark = pytest.mark.usefixtures("isolated")

MAX_LEN_ERROR = (
    "(APIServer pid=7) ERROR 11-30 09:00:01 [core.py:1] ValueError: User-specified max_model_len (4096) is "
    "greater than the derived max_model_len (max_position_embeddings=512 in model's config.json)."
)
POLL_METRICS = 'INFO:     127.0.0.1:53498 - "GET /metrics HTTP/1.1" 200 OK'
POLL_HEALTH = 'INFO:     127.0.0.1:53480 - "GET /health HTTP/1.1" 200 OK'


async def settle(pilot, rounds: int = 3):
    """Let the workers finish (only with no live server: its log tail never finishes) and the first
    screen fill (the polls started, every row of the form mounted)."""
    app = pilot.app
    for _ in range(rounds):
        await pilot.pause()
        await workers_done(app)
    await until(pilot, lambda: first_screen_full(app), "the first screen")
    await workers_done(app)
    await pilot.pause()


def text_of(widget) -> str:
    """What a widget shows on screen, line by line, at its size."""
    region = Region(0, 0, widget.size.width, widget.size.height)
    return "\n".join("".join(seg.text for seg in strip) for strip in widget.render_lines(region))


def shipped(name: str):
    from sparktui.core.profiles import resolve_profile

    return resolve_profile(name)


def ready_log(tmp_path):
    log = tmp_path / "ready.log"
    log.write_text((FIXTURES / "vllm-cpu" / "startup_final_eager.log").read_text())
    return log


# 1. A failed start that vLLM explains: diagnosis card, phase "failed", the words in the state.
async def test_a_failed_start_shows_the_supervisors_diagnosis(tmp_path):
    log = tmp_path / "failed.log"
    log.write_text(f"INFO 11-30 09:00:00 [api_server.py:1] vLLM API server version 0.32.0\n{MAX_LEN_ERROR}\n")
    record = server_record(log, status="exited", exit={"reason": "failed", "returncode": 1})
    app = SparkApp(backend=RecordBackend(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await until(pilot, lambda: widget(app, DiagnosisCard).diagnosis is not None, "the diagnosis card")
        card = widget(app, DiagnosisCard)
        assert card.display and "greater than the derived max_model_len" in card.diagnosis.message
        assert widget(app, PhaseStrip).phase == "failed"
        view = widget(app, ServerInfo).view
        assert view.state == "failed (unknown)" and view.detail == "exit status 1" and view.bad
        assert app.server.state == "failed"


# 1b. Memory that did not come back after the server ended: the panel says how much, who holds it, the fix.
async def test_a_leak_after_the_end_shows_the_figure_the_holders_and_the_fix(tmp_path):
    leak = {
        "leaked_bytes": 3 * GiB,
        "threshold_bytes": 2 * GiB,
        "shortfall_bytes": 3 * GiB,
        "waited_s": 30.0,
        "holders": [{"kind": "shm_file", "name": "/dev/shm/nccl-leftover", "bytes": 3 * GiB, "pids": [777]}],
    }
    record = server_record(ready_log(tmp_path), status="exited", exit={"reason": "stopped", "leak": leak})
    app = SparkApp(backend=RecordBackend(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await until(pilot, lambda: widget(app, DiagnosisCard).diagnosis is not None, "the diagnosis card")
        card = widget(app, DiagnosisCard).diagnosis
        assert card.kind == "memory did not come back"
        assert "3.00 GiB did not come back" in card.message and "/dev/shm/nccl-leftover" in card.message
        assert "remove /dev/shm/nccl-leftover" in card.hint and "stop pid 777" in card.hint


# 2. The log follows after a re-attach and after a relaunch, and says whether it follows.
async def test_the_log_follows_again_after_a_new_log_and_says_so(tmp_path):
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    first.write_text("".join(f"INFO line {i}\n" for i in range(200)))
    second.write_text("".join(f"INFO again {i}\n" for i in range(200)))
    backend = RecordBackend(server_record(first))
    app = SparkApp(backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        app.show_pane("server")
        log = widget(app, LogView)
        await until(pilot, lambda: log.line_count >= 200, "the first log")
        await log_drawn(pilot, log)
        log.focus()
        await pilot.press("home")  # the reader scrolls up: following pauses
        await pilot.pause()
        assert not log.follow
        assert "PAUSED" in widget(app, LogHeader).render().plain
        backend.record = server_record(second, started_at=2.0)  # relaunched: a new log
        await until(pilot, lambda: any("again 199" in line for line in log.lines()), "the second log")
        await until(
            pilot,
            lambda: (
                log.follow and log.scroll_y == log.max_scroll_y and "following" in widget(app, LogHeader).render().plain
            ),
            "the new log followed, and the header saying so",
        )
        assert log.follow and log.scroll_y == log.max_scroll_y
        assert "following" in widget(app, LogHeader).render().plain


async def test_a_log_read_while_its_pane_was_hidden_still_follows(tmp_path):
    app = SparkApp(backend=RecordBackend(server_record(ready_log(tmp_path))))
    async with app.run_test(size=(80, 24)) as pilot:
        log = await mounted(pilot, LogView)
        await until(pilot, lambda: log.line_count > 50, "the log, read in the hidden server pane")
        await log_drawn(pilot, log)
        await pilot.press("ctrl+n")
        await until(pilot, lambda: app.pane == "server" and log.scroll_y == log.max_scroll_y > 0, "the log at its end")
        assert app.pane == "server" and log.follow and log.scroll_y == log.max_scroll_y > 0


# 3. sparktui's own /metrics and /health polls are hidden, behind a key that shows them.
async def test_polling_lines_are_hidden_until_asked_for(tmp_path):
    log = tmp_path / "serving.log"
    log.write_text(
        "\n".join(
            [
                "INFO 11-30 09:00:00 [x.py:1] Application startup complete.",
                *[POLL_METRICS, POLL_HEALTH] * 30,
                "INFO real request",
            ]
        )
        + "\n"
    )
    app = SparkApp(backend=RecordBackend(server_record(log)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.show_pane("server")
        view = await mounted(pilot, LogView)
        await until(pilot, lambda: view.polling_hidden == 60, "the polling lines counted")
        assert not any("GET /metrics" in line or "GET /health" in line for line in view.lines())
        assert view.lines()[-1] == "INFO real request"
        assert "60 polling lines hidden" in widget(app, LogHeader).render().plain
        view.focus()
        await pilot.press("p")
        await until(pilot, lambda: sum("GET /metrics" in line for line in view.lines()) == 30, "the polls shown")
        assert sum("GET /metrics" in line for line in view.lines()) == 30


@asynccontextmanager
async def three_polls_hidden_at_120(tmp_path):
    """The panel at 120x40 following a log of three ready lines and three /metrics polls (hidden)."""
    log = tmp_path / "serving.log"
    log.write_text("\n".join(["INFO 11-30 09:00:00 [x.py:1] Application startup complete.", POLL_METRICS] * 3) + "\n")
    app = SparkApp(backend=RecordBackend(server_record(log)))
    async with app.run_test(size=(120, 40)) as pilot:
        view, header = widget(app, LogView), widget(app, LogHeader)
        await until(pilot, lambda: view.polling_hidden == 3, "the polling lines counted")
        yield pilot, view, header


async def test_at_120_columns_the_log_header_keeps_its_keys_in_view(tmp_path):
    """The server pane is about 44 columns there: '… polling lines hidden (p shows)' was cut at '(p'."""
    async with three_polls_hidden_at_120(tmp_path) as (pilot, _view, header):
        await until(pilot, lambda: header.render().plain.endswith("3 polls hidden (p)"), "the header")
        shown = header.render()
        assert shown.cell_len <= header.size.width < 60, (shown.plain, header.size.width)
        assert shown.plain.endswith("3 polls hidden (p)") and "following" in shown.plain, shown.plain


async def test_at_120_columns_the_log_header_paused_with_polls_hidden_and_no_wrap_fits_whole(tmp_path):
    """It was 48 cells in the 42-column pane, cut before the wrap key."""
    async with three_polls_hidden_at_120(tmp_path) as (pilot, view, header):
        view.wrap = False
        view.follow = False
        await until(
            pilot, lambda: "PAUSED" in header.render().plain and "no wrap" in header.render().plain, "the header"
        )
        for hidden in (3, 1234, 123_456):
            header.polling_hidden = hidden
            shown = header.render()
            assert shown.cell_len <= header.size.width, (shown.plain, header.size.width)
            assert "PAUSED" in shown.plain and "(p)" in shown.plain and "no wrap (w)" in shown.plain, shown.plain


async def test_at_80x24_a_long_vllm_line_shows_its_whole_message(tmp_path):
    """Issue 23, item 8: lines were cut at 80 columns with no wrap; now they wrap under the time."""
    log = tmp_path / "serving.log"
    log.write_text("INFO 11-30 09:00:00 [x.py:1] Starting\n" + MAX_LEN_ERROR + "\nINFO 11-30 09:00:02 [x.py:1] after\n")
    app = SparkApp(backend=RecordBackend(server_record(log)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.show_pane("server")
        view = await mounted(pilot, LogView)
        await until(pilot, lambda: view.line_count == 3, "the log")
        await until(
            pilot, lambda: any("09:00:02 after" in line for line in screen_text(app)), "the last line on screen"
        )
        screen = screen_text(app)
        text = " ".join(line.strip() for line in screen)
        assert "09:00:01 ValueError: User-specified max_model_len (4096)" in text, screen
        assert "(max_position_embeddings=512 in model's config.json)." in text, screen
        assert "09:00:02 after" in text, screen


# 4. A re-attach loads the running server's profile, its fit and the predicted column.
async def test_a_reattach_restores_the_profile_and_the_predicted_column(tmp_path):
    path = shipped("70b-dense-single-user")
    fit = {"kv_cache_bytes": 30 * GiB, "kv_cache_tokens": 98304, "max_concurrency": 3.0}
    record = server_record(ready_log(tmp_path), profile_path=path, preflight={"warnings": [], "fit": fit})
    app = SparkApp(backend=RecordBackend(record))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.profile is not None and app.fit and app.fit.verdict != "n/a", "the profile")
        assert app.profile.name == "70b-dense-single-user"
        assert config_pane(app).form.config.model == app.profile.serve.model
        predicted = dict(widget(app, ServerInfo).view.predicted)
        assert predicted == {"KV GiB": "30.00", "KV tokens": "98,304", "concurrency": "3.00x"}
        assert "—" not in widget(app, ServerInfo).render().plain.split("predicted")[1].splitlines()[1]


# 5. The guard display follows the server and the profile, never an old reading.
async def test_after_a_stop_the_guard_shows_the_profiles_lines_not_the_last_reading(tmp_path):
    backend = RecordBackend(server_record(ready_log(tmp_path)))
    app = SparkApp(profile="70b-dense-single-user", backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.live, "the server")
        await until(pilot, lambda: "watching" in widget(app, MemoryGauge).render().plain, "the guard")
        assert "watching: MemAvailable 21.6 GiB" in widget(app, MemoryGauge).render().plain
        await pilot.press("f6")
        await until(pilot, lambda: not app.server.live, "the stop")
        gauge = widget(app, MemoryGauge)
        assert "watching" not in gauge.render().plain
        assert gauge.guard.for_next_launch and gauge.guard.line_gib()[::2] == (10.0, 3.5)
        await pilot.press("ctrl+g")
        await settle(pilot)
        app.screen.query_one(Input).value = "30 20 15"
        await pilot.press("enter")
        await settle(pilot, rounds=6)  # later polls bring the stopped server's record again
        assert gauge.guard.line_gib() == (30, 20, 15)
        markers = gauge.render().plain
        assert "W<30" in markers and "K<15" in markers


async def test_guard_lines_of_a_running_server_move_live(tmp_path):
    backend = RecordBackend(server_record(ready_log(tmp_path)))
    app = SparkApp(profile="70b-dense-single-user", backend=backend)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.live, "the server")
        await pilot.press("ctrl+g")
        await until(pilot, lambda: isinstance(app.screen, PromptScreen), "the dialog")
        app.screen.query_one(Input).value = "30 20 15"
        await pilot.press("enter")
        gauge = widget(app, MemoryGauge)
        await until(pilot, lambda: gauge.guard.line_gib()[0] == 30, "the new lines")
        assert backend.record["guard"]["lines"]["kill_below_gib"] == 15
        assert not gauge.guard.for_next_launch and app.profile.guard.lines.get("warn_below_gib") != 30


async def test_the_guard_dialog_title_is_whole_at_80_columns():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+g")
        await settle(pilot)
        assert isinstance(app.screen, PromptScreen)
        title_widget = app.screen.query_one(".dialog-title")
        title = text_of(title_widget)
        assert "warn term kill" in title, title
        # All of it on screen: no line cut at the dialog's edge.
        assert " ".join(title.split()) == " ".join(str(title_widget.render()).split()), title


# 6. Machine labels say what the fit assumes; the bar and the words give one OS figure.
async def test_machine_auto_says_this_host(isolated):
    path = isolated / "auto.toml"
    path.write_text(shipped("70b-dense-single-user").read_text().replace('name = "dgx-spark"', 'name = "auto"'))
    app = SparkApp(profile=str(path), backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await until(pilot, lambda: fit_box(app).machine is not None, "the machine")
        line = str(app.query_one("#profile-line").render())
        assert "this host" in line and "machine auto" not in line, line


async def test_the_bars_os_figure_is_the_one_the_reasons_give():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await until(pilot, lambda: app.fit is not None and app.fit.verdict == "fits", "the fit")
        assert [label for _, label, _ in app.fit.segments if "OS" in label] == ["OS keeps"]  # one OS figure
        os_bytes = next(n for key, label, n in app.fit.segments if label == "OS keeps")
        said = next(r for r in app.fit.reasons if "the OS keeps" in r)
        assert f"the OS keeps {os_bytes / GiB:.2f}" in said or f"{os_bytes / GiB:.1f}" in said, (os_bytes, said)
        assert f"OS keeps {os_bytes / GiB:.1f}" in widget(app, FitPanel).render().plain


def test_a_trip_report_never_reads_a_line_against_itself():
    from sparktui.runtime.guard.guard import TripReport

    report = TripReport("term", "below", 18.5, 18.497, 18.4, 1.0, [], [], False, None, True, 0.3, [], 0.0)
    first = report.summary().splitlines()[0]
    assert "MemAvailable 18.497 GiB vs line 18.500 GiB" in first, first


# 7. Quitting asks about unsaved edits and says that the server keeps running.
async def test_quit_asks_about_unsaved_edits_and_marks_the_profile_modified():
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert "(modified)" not in str(app.query_one("#profile-line").render())
        app.query_one("#flag-max_model_len", Input).value = "16384"
        await settle(pilot)
        assert "(modified)" in str(app.query_one("#profile-line").render())
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and "unsaved" in app.screen.question
        await pilot.press("n")
        await pilot.pause()
        assert app.is_running


async def test_quit_says_the_server_keeps_running(tmp_path):
    class Recording(SparkApp):
        said = ""

        def exit(self, result=None, return_code=0, message=None):
            self.said = str(message)
            super().exit(result, return_code, message)

    app = Recording(backend=RecordBackend(server_record(ready_log(tmp_path))))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None, "the server")
        await pilot.press("ctrl+q")
        await pilot.pause()
    said = app.said
    assert "keeps running" in said and "sparktui stop --port 8000" in said


# 8. At 120×40 the server column is wide enough for its table and the log.
async def test_at_120_columns_the_server_pane_has_room(tmp_path):
    app = SparkApp(profile="70b-dense-single-user", backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        pane = app.query_one("#server-pane")
        assert pane.content_region.width >= 42, pane.content_region
        info = widget(app, ServerInfo)
        header = next(line for line in text_of(info).splitlines() if "predicted" in line)
        assert "vLLM said" in header  # on one line, not wrapped
        assert widget(app, LogView).size.width >= 42


# 9. Small things.
async def test_after_a_kill_it_says_killed_not_exit_none(tmp_path):
    app = SparkApp(backend=RecordBackend(server_record(ready_log(tmp_path))))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.server is not None and app.server.live, "the server")
        await pilot.press("f8")
        await pilot.pause()
        await pilot.press("y")
        await until(pilot, lambda: not app.server.live, "the kill")
        view = widget(app, ServerInfo).view
        assert view.state == "stopped (killed)" and "None" not in view.detail


async def test_the_profile_picker_filters_as_you_type_and_lists_yours_first(isolated):
    from sparktui.core.profiles import load_profile, save_profile, user_profile_path

    mine = dataclasses.replace(load_profile("70b-dense-single-user"), name="zz-mine")
    save_profile(mine, user_profile_path("zz-mine"))
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+o")
        await settle(pilot)
        assert isinstance(app.screen, ChoiceScreen)
        assert app.screen.options[0][0].startswith("zz-mine  (user)")
        await pilot.press(*"35b 5-users")
        await pilot.pause()
        assert [app.screen.options[i][0].split()[0] for i in app.screen.shown] == ["35b-moe-5-users-8k"]
        await pilot.press("enter")
        await settle(pilot)
        assert app.profile.name == "35b-moe-5-users-8k"


async def test_help_says_esc_closes_it():
    app = SparkApp(backend=SampleBackend())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        assert "Esc closes" in text_of(app.screen.query_one("#help-title"))
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, HelpScreen)


# The panel reads live figures from the supervisor's record, not from /metrics itself.
async def test_live_figures_come_from_the_supervisors_record(tmp_path):
    metrics = {"kv_cache_usage_pct": 12.5, "running": 2, "waiting": 0, "generation_tokens_per_s": 40.0,
               "prompt_tokens_per_s": 100.0, "ttft_p50_s": 0.12, "ttft_p95_s": 0.3, "at": 1.0}  # fmt: skip
    app = SparkApp(backend=RecordBackend(server_record(ready_log(tmp_path), metrics=metrics)))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: widget(app, ServerInfo).view.metrics, "the figures")
        figures = dict(widget(app, ServerInfo).view.metrics)
        assert figures["KV"] == "12.5%" and figures["gen"] == "40.0 tok/s" and figures["TTFT p50"] == "0.12s"
    assert not hasattr(app.backend, "metrics")  # no scraping path left in the facade


# A worker that dies says what failed, and its poll goes on.
async def test_a_worker_that_dies_is_reported_and_its_poll_goes_on(monkeypatch):
    from sparktui.ui.panes import ServerPane

    monkeypatch.setattr(ServerPane, "POLL_S", 0.1)  # the idle reads, every 3rd tick: 0.3 s apart, not 3 s

    class Broken(RecordBackend):
        def attach(self, port=None):
            self.attaches += 1
            raise RuntimeError("state directory vanished")

        def watch_servers(self):
            # no watch of the state dir: the idle poll reads the supervisor's state every few ticks
            # (with the watch, it reads it only when a record changes)
            raise Unavailable("no inotify here")

    backend = Broken()
    app = SparkApp(backend=backend)
    server_pane_class = type(server_pane)  # noqa: F841  (keeps the helper imported for readers)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: backend.attaches >= 2, "a second poll", timeout=10)
        said = [str(n.message) for n in app._notifications]
        assert any(
            "polling the supervisor's state failed: RuntimeError: state directory vanished" in s for s in said
        ), said


def test_sample_backend_is_a_spark():
    assert sample().mem_total > 100 * GiB

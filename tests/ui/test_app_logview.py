"""The log view: bounded, coloured by severity, follows, and coalesces floods."""

from textual import events
from textual.app import App, ComposeResult

from sparktui.ui.widgets.logview import LogView, severity_of, wrap_rows
from tests.support.app import log_drawn


def test_severity_from_vllm_prefixes():
    assert severity_of("(EngineCore pid=7) ERROR 11-29 19:24:01 [core.py:1] boom") == "error"
    assert severity_of("WARNING 11-29 19:24:01 [x.py:2] careful") == "warning"
    assert severity_of("(APIServer pid=3) INFO 11-29 19:24:01 [api.py:9] hello") == "info"
    assert severity_of("Traceback (most recent call last):") == "error"
    assert severity_of("RuntimeError: Engine core initialization failed") == "error"
    assert severity_of("Loading safetensors checkpoint shards: 100%") == "plain"


class LogApp(App):
    def compose(self) -> ComposeResult:
        yield LogView(max_lines=1000, id="log")


async def test_flood_is_bounded_and_says_what_it_skipped():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        for start in range(0, 100_000, 5000):
            log.push([f"INFO 11-29 19:24:01 [x.py:1] line {i}" for i in range(start, start + 5000)])
        await log_drawn(pilot, log)
        assert log.total_lines == 100_000
        assert log.line_count <= 1000
        lines = log.lines()
        assert lines[-1].endswith("line 99999")
        assert any("lines skipped to keep up" in line for line in lines)
        # Following: the newest line is on screen.
        assert log.scroll_y == log.max_scroll_y


async def test_scrolling_up_pauses_follow_and_f_resumes():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.push([f"INFO line {i}" for i in range(200)])
        await log_drawn(pilot, log)
        log.focus()
        await pilot.press("pageup")
        await pilot.pause()
        assert not log.follow
        log.push(["INFO new line"])
        await log_drawn(pilot, log)
        assert log.scroll_y < log.max_scroll_y  # stayed where the reader is
        await pilot.press("f")
        await pilot.pause()
        assert log.follow and log.scroll_y == log.max_scroll_y


async def test_scrolling_down_to_the_end_follows_again():
    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.push([f"INFO line {i}" for i in range(200)])
        await log_drawn(pilot, log)
        log.focus()
        await pilot.press("pageup", "pageup")
        await pilot.pause()
        assert not log.follow
        await pilot.press("pagedown")  # down, not yet at the end: still paused
        await pilot.pause()
        assert not log.follow and log.scroll_y < log.max_scroll_y
        await pilot.press("pagedown")  # at the end
        await pilot.pause()
        assert log.follow
        log.push(["INFO new line"])
        await log_drawn(pilot, log)
        assert log.scroll_y == log.max_scroll_y and log.lines()[-1] == "INFO new line"
        await pilot.press("pageup")
        await pilot.pause()
        assert not log.follow
        notches = 0
        while not log.follow and notches < 40:  # the wheel, down to the end
            log.post_message(events.MouseScrollDown(log, 1, 1, 0, 1, 0, False, False, False))
            await pilot.pause()
            notches += 1
        assert log.follow and log.scroll_y == log.max_scroll_y and notches > 1


def test_colour_codes_and_carriage_returns_are_cleaned():
    from sparktui.ui.widgets.logview import clean

    raw = "\x1b[0;36m(APIServer pid=1)\x1b[0;0m INFO 02-05 00:05:28 [utils.py:253] hello\r"
    assert clean(raw) == "(APIServer pid=1) INFO 02-05 00:05:28 [utils.py:253] hello"
    assert severity_of(clean(raw)) == "info"
    assert clean("Loading: 10%\rLoading: 50%\rLoading: 100%") == "Loading: 100%"
    assert clean("a\tb\x07") == "a   b"


def test_the_phase_strip_knows_the_log_parsers_phases():
    from sparktui.core import vllm_log
    from sparktui.ui.widgets import server

    assert server.PHASES == vllm_log.PHASES and server.FAILED == vllm_log.FAILED


class NarrowLogApp(App):
    CSS = "LogView { width: 50; height: 10; }"

    def compose(self) -> ComposeResult:
        yield LogView(max_lines=1000, id="log")


async def test_a_50_column_log_shows_vllms_message_not_its_prefix_and_scrolls_sideways():
    """At 120–160 columns the log pane is about 50 wide: vLLM's '(APIServer pid=N) INFO date [file:line] '
    filled it before the message began."""
    app = NarrowLogApp()
    async with app.run_test(size=(80, 12)) as pilot:
        log = app.query_one(LogView)
        message = "Starting vLLM API server 0 on http://127.0.0.1:8000"
        log.push(
            [
                f"(APIServer pid=20603) INFO 11-29 19:24:14 [launcher.py:46] {message}",
                "(EngineCore_DP0 pid=20731) WARNING 11-29 19:24:15 [core.py:99] " + "x" * 80,
            ]
        )
        await log_drawn(pilot, log)
        first = log.render_line(0).text
        assert first.startswith("19:24:14 Starting vLLM API server"), first
        assert "pid=" not in first and "launcher.py" not in first
        rows = [log.render_line(y).text for y in range(log.size.height)]  # wrapped: the first line takes two
        assert any(row.startswith("19:24:15 engine xxx") for row in rows), rows
        assert log.lines()[0].endswith(message) and log.lines()[0].startswith("(APIServer pid=20603)")
        # longer than the pane: with wrapping off (w) it scrolls sideways (the keys of a focused log)
        log.focus()
        await pilot.press("w")
        await pilot.pause()
        assert not log.wrap and log.virtual_size.width > log.size.width
        await pilot.press("right", "right", "right")
        await pilot.pause()
        assert log.scroll_x > 0 and log.render_line(1).text.strip().endswith("x")


async def test_a_long_line_wraps_so_its_whole_message_shows_under_the_time():
    """At 80×24 and in a 50-column pane a vLLM line is longer than the view: wrapped (the default),
    every word of it is on screen, the rows after the first hang under the message, and nothing
    scrolls sideways; `w` lets lines run on again and back."""
    app = NarrowLogApp()
    async with app.run_test(size=(80, 12)) as pilot:
        log = app.query_one(LogView)
        message = (
            "ValueError: User-specified max_model_len (4096) is greater than the derived max_model_len "
            "(max_position_embeddings=512 in model's config.json)."
        )
        log.push([f"(APIServer pid=7) ERROR 11-30 09:00:01 [core.py:1] {message}", "INFO after"])
        await log_drawn(pilot, log)
        width = log.size.width
        rows = [log.render_line(y).text for y in range(log.size.height)]
        shown = [r.rstrip() for r in rows if r.strip()]
        assert shown[0].startswith("09:00:01 ValueError: User-specified"), shown
        assert all(len(r) <= width for r in rows)
        assert all(r.startswith(" " * len("09:00:01 ")) for r in shown[1:-1]), shown  # hung under the message
        assert " ".join(r.strip() for r in shown[:-1]) == f"09:00:01 {message}", shown
        assert shown[-1] == "INFO after"
        assert log.virtual_size.width <= width and log.max_scroll_x == 0
        log.focus()
        await pilot.press("w")
        await pilot.pause()
        assert log.render_line(1).text.rstrip() == "INFO after"  # one row per line again
        await pilot.press("w")
        await pilot.pause()
        assert log.render_line(len(shown) - 1).text.rstrip() == "INFO after"


def test_wrap_rows_break_after_a_space_and_hang_under_the_message():
    text = "09:00:01 " + "word " * 30
    rows = wrap_rows(text, 9, 40)
    assert rows[0] == (0, 39, 0) and all(indent == 9 for _, _, indent in rows[1:])
    assert all(end - start + indent <= 40 for start, end, indent in rows)
    assert "".join(text[s:e] for s, e, _ in rows) == text  # nothing lost, nothing twice
    assert wrap_rows("x" * 100, 0, 40) == [(0, 40, 0), (40, 78, 2), (78, 100, 2)]  # no space: cut, 2 in
    assert wrap_rows("short", 0, 40) == [(0, 5, 0)]


async def test_a_flood_of_small_batches_reaches_the_view_a_frame_at_a_time(tmp_path):
    """The tail's batches wait in an inbox while one message is on its way: the panel takes them all
    at once (a message each was the panel's main cost under a flood), none lost and none reordered."""
    from sparktui.ui.app import SparkApp
    from sparktui.ui.panes.server_log import ServerLog
    from tests.support.app import SampleBackend, until

    class Flood(SampleBackend):
        def follow_log(self, path, stop):
            for i in range(3000):
                yield [f"INFO 11-29 19:24:01 [x.py:1] line {i}"]

    app = SparkApp(backend=Flood())
    async with app.run_test(size=(120, 40)) as pilot:
        pane = app.query_one(ServerLog)
        view = pane.view
        pushes: list[int] = []
        push = view.push

        def counted(lines, *args):
            pushes.append(len(lines))
            return push(lines, *args)

        view.push = counted  # type: ignore[method-assign]
        pane.start_tail(tmp_path / "server.log")
        await until(pilot, lambda: view.total_lines == 3000, "every line")
        await log_drawn(pilot, view)
        assert len(pushes) < 300, f"{len(pushes)} pushes for 3000 one-line batches"
        lines = view.lines()
        assert lines[-1].endswith("line 2999")
        numbers = [int(line.rsplit(" ", 1)[1]) for line in lines if " line " in line]
        assert numbers == sorted(numbers)


async def test_new_lines_move_the_scrollbar_without_laying_out_the_screen():
    """The view's box is 1fr: more rows change what it scrolls over, not where anything is. Setting
    Textual's `virtual_size` laid out every widget on the screen at each draw (ten a second under a
    flood, most of the panel's time while keys waited); now only a scrollbar coming or going does."""
    from tests.support.app import screen_text

    app = LogApp()
    async with app.run_test(size=(80, 20)) as pilot:
        log = app.query_one(LogView)
        log.push([f"INFO 11-29 19:24:01 [x.py:1] line {i}" for i in range(100)])
        await log_drawn(pilot, log)
        assert log.show_vertical_scrollbar and log.scroll_y == log.max_scroll_y
        layouts: list[bool] = []
        refresh = log.refresh

        def counted(*regions, **kwargs):
            layouts.append(bool(kwargs.get("layout")))
            return refresh(*regions, **kwargs)

        log.refresh = counted  # type: ignore[method-assign]
        before = log.max_scroll_y
        for batch in range(5):
            log.push([f"INFO 11-29 19:24:01 [x.py:1] more {batch} {i}" for i in range(20)])
            await log_drawn(pilot, log)  # each batch a draw of its own
        assert layouts and not any(layouts), f"{sum(layouts)} of {len(layouts)} refreshes laid out the screen"
        assert log.max_scroll_y == before + 100 and log.scroll_y == log.max_scroll_y  # still following
        assert log.vertical_scrollbar.window_virtual_size == log.virtual_size.height == len(log._rows)
        assert screen_text(app)[-1].endswith("more 4 19")  # the newest line, drawn on the last row

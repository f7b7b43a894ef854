"""The server pane's log: the header line and the log view of the followed server, the tail that
reads the log, what the log says of the start-up (phase, figures, diagnosis), and the preflight
lines each launch from the panel puts at the top of its log.

It owns the tail (a worker, stopped when the pane follows another server or the server ended),
the log's path and its parsed progress; it posts `LogRead` when the progress changed, for the
pane to draw the phases, the figures and the diagnosis again.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message

from sparktui.ui.actions import BY_ID, key_label, keys_for
from sparktui.ui.backend import Unavailable
from sparktui.ui.panes.base import backend_of, io_worker, post_up
from sparktui.ui.serverviews import LogProgress, PreflightNote, ServerStatus
from sparktui.ui.widgets.logview import LogView
from sparktui.ui.widgets.server import LogHeader

if TYPE_CHECKING:
    from sparktui.ui.backend import Backend


class LogInbox:
    """What the tail read and the panel has not taken yet: the newest lines (as many as the view
    draws at once; older ones only counted, as the view would skip them), the progress as of the
    last line, an error. A flood of small batches reaches the panel as one batch a frame."""

    def __init__(self, keep: int) -> None:
        self._lock = threading.Lock()
        self._lines: deque[str] = deque(maxlen=keep)
        self._skipped = 0
        self._progress: LogProgress | None = None
        self._error: str | None = None
        self._told = False  # a LogReady is on its way

    def put(self, lines: list[str], progress: LogProgress | None, error: str | None = None) -> bool:
        """Add what was read; True when the panel must be told (nothing on its way to it)."""
        with self._lock:
            keep = self._lines.maxlen or 0
            self._skipped += max(0, len(self._lines) + len(lines) - keep)
            self._lines.extend(lines)
            if error is None:
                self._progress = progress
            else:
                self._error = error
            told, self._told = self._told, True
            return not told

    def take(self) -> tuple[list[str], int, LogProgress | None, str | None]:
        """Everything put since the last take: lines, how many older ones were dropped, progress, error."""
        with self._lock:
            lines, skipped, error = list(self._lines), self._skipped, self._error
            self._lines.clear()
            self._skipped, self._error, self._told = 0, None, False
            return lines, skipped, self._progress, error


class ServerLog(Vertical):
    KEEP_PREFLIGHTS = 8  # launches whose preflight lines are kept (a switch back shows them again)

    class LogRead(Message):
        """What the log says of the start-up changed."""

    class LogReady(Message, bubble=False):
        """The tail put lines in `inbox` (one message on its way at a time: the rest ride along).
        Not for the widgets above: under a flood they would each take it ten times a second."""

        def __init__(self, inbox: LogInbox) -> None:
            super().__init__()
            self.inbox = inbox

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.progress: LogProgress | None = None
        self.log_path: Path | None = None
        # What each launch from here found before it started, by its log: shown at the top of that log
        self.preflight: dict[Path, tuple[PreflightNote, ...]] = {}
        self._log_stop = threading.Event()
        self._inbox: LogInbox | None = None  # the current tail's

    def compose(self) -> ComposeResult:
        yield LogHeader(id="log-header")
        yield LogView(id="log")

    @property
    def backend(self) -> Backend:
        return backend_of(self)

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    def on_mount(self) -> None:
        log = self.view
        for mode in ("follow", "show_polling", "hidden", "wrap"):
            self.watch(log, mode, self._log_mode_changed, init=False)
        self._log_mode_changed()

    def on_unmount(self) -> None:
        self._log_stop.set()

    # -- what the pane tells it -----------------------------------------------------------------------

    def follow_server(self, status: ServerStatus) -> None:
        """The followed server's record, as read: its log (a new one is read from its start), and
        the tail's end a moment after the server's (to read its last lines)."""
        if status.log_path and status.log_path != self.log_path:
            self.start_tail(status.log_path)
        if not status.live and not self._log_stop.is_set():
            self.set_timer(1.0, self._log_stop.set)

    def forget(self) -> None:
        """The pane follows another server: this log is no longer read, nor shown."""
        self.progress = None
        self._log_stop.set()
        self.log_path = None
        self.view.clear()

    def clear(self) -> None:
        """A launch from here: its log starts empty (the old one's progress with it)."""
        self.progress = None
        self.view.clear()

    def launched(self, log_path: Path | None, notes: tuple[PreflightNote, ...]) -> None:
        """A launch or restart the supervisor accepted: its preflight on top of its log, read from its start."""
        self.progress = None
        self._keep_preflight(log_path, notes)
        if log_path is not None and log_path == self.log_path:
            self.start_tail(log_path)  # a poll got there first: read again, the preflight on top
        else:
            self.log_path = None  # the new run's log, from its start

    def _keep_preflight(self, log_path: Path | None, notes: tuple[PreflightNote, ...]) -> None:
        """Keep a launch's preflight lines for the top of its log; say its warnings now (without
        blocking anything: the server is already starting)."""
        if not notes:
            return
        if log_path is not None:
            self.preflight[log_path] = notes
            for old in list(self.preflight)[: -self.KEEP_PREFLIGHTS]:
                del self.preflight[old]
        else:
            self.view.note(self._note_lines(notes))  # no log to tie them to: now
        warnings = [n.text for n in notes if n.warning]
        if warnings:
            shown = warnings[:3] + ([f"… {len(warnings) - 3} more at the top of the log"] if len(warnings) > 3 else [])
            self.app.notify(
                "\n".join(shown),
                title=f"Preflight: {len(warnings)} warning{'s' if len(warnings) > 1 else ''}",
                severity="warning",
                timeout=20,
            )

    @staticmethod
    def _note_lines(notes: tuple[PreflightNote, ...]) -> list[tuple[str, str]]:
        return [("warning" if n.warning else "note", n.line()) for n in notes]

    # -- the tail -------------------------------------------------------------------------------------

    def start_tail(self, path: Path) -> None:
        self._log_stop.set()
        self.log_path = path
        self._log_stop = threading.Event()
        self.progress = None
        log = self.view
        log.clear()  # follows again: a new log is read from its end
        notes = self.preflight.get(path)
        if notes:
            log.note(self._note_lines(notes))
        self._inbox = LogInbox(log.max_lines // 2)  # the most an empty view takes in one draw
        self._tail_log(path, self._log_stop, self._inbox)

    def stop_tail(self) -> None:
        self._log_stop.set()

    @io_worker("tail-log", "following the log")
    def _tail_log(self, path: Path, stop: threading.Event, inbox: LogInbox) -> None:
        from sparktui.ui.logstate import LogState  # the log parser, loaded after the first frame

        state = LogState()
        try:
            for batch in self.backend.follow_log(path, stop):
                if stop.is_set():
                    return
                state.feed(batch)
                if inbox.put(batch, state.progress()):
                    self.post_message(self.LogReady(inbox))
        except (Unavailable, OSError) as exc:
            if inbox.put([], None, str(exc)):
                self.post_message(self.LogReady(inbox))

    def on_server_log_log_ready(self, message: LogReady) -> None:
        if message.inbox is not self._inbox:
            return  # an earlier tail's (the pane follows another log now)
        lines, skipped, progress, error = message.inbox.take()
        log = self.view
        if lines or skipped:
            log.push(lines, skipped)
        if error:
            log.push([f"[sparktui] cannot follow the log: {error}"])
            return
        if progress != self.progress:
            self.progress = progress
            post_up(self, self.LogRead())

    # -- the header and the log's keys ----------------------------------------------------------------

    def _log_mode_changed(self) -> None:
        log = self.view
        keymap = dict(getattr(self.app, "keymap", {}))
        follow, polling, wrap = (key_label(keys_for(BY_ID[f"log.{n}"], keymap)) for n in ("follow", "polling", "wrap"))
        self.query_one(LogHeader).show(
            log.follow, log.show_polling, log.polling_hidden, (follow, polling, wrap), log.wrap
        )

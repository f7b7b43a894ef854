"""The server pane's list of every server on this machine (the view: widgets/serverlist.py), with
what keeps it: the records as last read (ended ones too), a wait on the state dir that reads them
again when one changes (inotify: no CPU at idle), and the read itself, never two at once.

It posts `ServersChanged` (what the panel lists: live, lost, and the one followed) and notices when
another server ends, and tells the pane when a server started elsewhere (it may follow that one).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol, cast

from textual.message import Message
from textual.worker import Worker

from sparktui.ui.backend import Unavailable
from sparktui.ui.messages import ServersChanged
from sparktui.ui.panes.base import Pane, backend_of, io_worker, post_up
from sparktui.ui.serverviews import ServerEntry
from sparktui.ui.widgets.serverlist import ServerList

if TYPE_CHECKING:
    from sparktui.runtime.records.state_watch import StateDirWatch
    from sparktui.ui.backend import Backend


class Following(Protocol):
    """What the server pane holds that the list reads, and what it is told."""

    target: int | None  # the port of the server the pane follows
    servers: tuple[ServerEntry, ...]  # what the panel lists now

    def appeared(self, port: int) -> None: ...

    def resume_poll(self) -> None: ...


class ServerRoster(ServerList):
    class Listed(Message):
        def __init__(self, entries: tuple[ServerEntry, ...] | None, error: str | None = None) -> None:
            super().__init__()
            self.entries, self.error = entries, error

    class RecordsMoved(Message):
        """A server's record changed on disk (a server started, moved on or ended)."""

    class WatchEnded(Message, bubble=False):
        """The wait on the state dir stopped (an error): the pane's poll must look for servers."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.recorded: tuple[ServerEntry, ...] = ()  # every record, as last read (ended ones too)
        self._list_worker: Worker[None] | None = None
        self._list_again = False
        self._watch: StateDirWatch | None = None
        self.watching = False  # the state dir watch runs (else the pane's poll reads the list now and then)
        self._unmounted = threading.Event()

    @property
    def backend(self) -> Backend:
        return backend_of(self)

    @property
    def pane(self) -> Following:
        return cast("Following", self.parent)  # the server pane (not imported: it imports this module)

    def on_unmount(self) -> None:
        self._unmounted.set()
        if self._watch is not None:
            self._watch.close()

    def start_listing(self) -> None:
        self.refresh_list()
        # A thread for the pane's lifetime, not a worker: workers are tasks that end (the app and
        # its tests wait for them), and this wait must not hold a slot of the pool they share.
        threading.Thread(target=self._watch_records, name="sparktui-server-watch", daemon=True).start()

    def _watch_records(self) -> None:
        """Post RecordsMoved whenever a server's record changes (blocks in the kernel meanwhile)."""
        try:
            watch = self.backend.watch_servers()
        except (Unavailable, OSError):
            return  # the poll reads the list every few seconds instead
        self._watch = watch
        if self._unmounted.is_set():  # unmounted while this thread started: on_unmount saw no watch
            watch.close()
        self.watching = True
        try:
            for _ in watch:
                self.post_message(self.RecordsMoved())
        except OSError:
            pass
        finally:
            self.watching = False
            try:
                self.post_message(self.WatchEnded())  # the pane's poll looks for servers again
            except RuntimeError:  # the app's loop closed meanwhile
                pass

    def on_server_roster_watch_ended(self) -> None:
        self.pane.resume_poll()

    def on_server_roster_records_moved(self) -> None:
        self.refresh_list()

    def refresh_list(self) -> None:
        if Pane.running(self._list_worker):
            self._list_again = True  # one more read when this one is done: never two at once
            return
        self._list_worker = self._list_servers()

    @io_worker("server-list", "listing the servers")
    def _list_servers(self) -> None:
        try:
            entries = self.backend.servers()
        except (Unavailable, OSError) as exc:
            self.post_message(self.Listed(None, str(exc)))
            return
        self.post_message(self.Listed(tuple(entries)))

    def on_server_roster_listed(self, message: Listed) -> None:
        if self._list_again:
            self._list_again = False
            self.refresh_list()
        if message.entries is None:
            return
        before = {e.port: e for e in self.recorded}
        self.recorded = message.entries
        target = self.pane.target
        for entry in message.entries:
            was = before.get(entry.port)
            if entry.port == target:
                continue  # the followed server's end is the pane's own news
            if was is not None and was.live and not entry.live:
                text = f"the server on :{entry.port} ({entry.profile}) is {entry.text()}"
                self.app.notify(text, severity="error" if entry.state in ("failed", "lost") else "information")
        fresh = [e for e in message.entries if e.live and (e.port not in before or not before[e.port].live)]
        if fresh:
            self.pane.appeared(fresh[0].port)  # before the list goes out: it may follow that one
        self.publish()

    def publish(self) -> None:
        """What the panel lists, for the app to share: an ended server stays while followed."""
        pane = self.pane
        shown = tuple(e for e in self.recorded if e.live or e.state == "lost" or e.port == pane.target)
        if shown != pane.servers:
            post_up(self, ServersChanged(shown))

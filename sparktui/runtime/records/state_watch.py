"""Wake when a server's record changes: a new server, one that ends, a cluster node that moves on.

The panel lists every server and must notice one started elsewhere (`sparktui serve`, another
panel) without polling the state dir while nothing happens: an inotify watch on `servers/` and
`cluster/` blocks in the kernel at idle (no CPU at all). A folder that does not exist yet is
waited for through the nearest folder above it that does. Where there is no inotify, a cheap
look at the folders' modification times every `fallback_s` stands in.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Iterator
from pathlib import Path

from sparktui.runtime.host import inotify as ino

WATCHED = ("servers", "cluster")  # the state dir's folders whose files describe running servers
_DIR_EVENTS = ino.IN_CREATE | ino.IN_MOVED_TO | ino.IN_CLOSE_WRITE | ino.IN_DELETE | ino.IN_MOVED_FROM
_GONE = ino.IN_DELETE_SELF | ino.IN_MOVE_SELF | ino.IN_IGNORED


def _nearest_existing(path: Path) -> Path:
    while not path.is_dir() and path != path.parent:
        path = path.parent
    return path


class StateDirWatch:
    """Iterate to get one item per burst of changes under `root`'s server folders (a burst: events
    closer than `settle_s`, so an atomic replace and its neighbours wake the reader once).
    `close()`, from any thread, ends the iteration at once (a pipe wakes the wait)."""

    def __init__(self, root: Path, *, settle_s: float = 0.2, fallback_s: float = 2.0) -> None:
        self.root = root
        self.settle_s = settle_s
        self.fallback_s = fallback_s
        self._closed = threading.Event()
        self.armed = threading.Event()  # set once the watch sees changes (what comes after wakes it)
        self._lock = threading.Lock()  # the pipe is closed once, never written after (fds are reused)
        self._wake_r = self._wake_w = -1  # made when the iteration starts (a watch never run holds none)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._wake_w >= 0:
                try:
                    os.write(self._wake_w, b"x")
                except OSError:
                    pass  # full: a wake is already queued

    def __iter__(self) -> Iterator[None]:
        with self._lock:
            self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            try:
                notify = ino.Inotify()
            except OSError:
                yield from self._poll_mtimes()
                return
            with notify:
                yield from self._watch(notify)
        finally:
            with self._lock:
                os.close(self._wake_r)
                os.close(self._wake_w)
                self._wake_r = self._wake_w = -1

    def _watch(self, notify: ino.Inotify) -> Iterator[None]:
        watched: dict[int, Path] = {}
        folders = {self.root / name for name in WATCHED}

        def arm() -> None:
            """Watch each folder that exists, and for each that does not, the folder it will appear in."""
            targets = {folder if folder.is_dir() else _nearest_existing(folder.parent) for folder in folders}
            if watched and targets == set(watched.values()):
                return  # the same folders: removing their watches would only queue IN_IGNORED events
            for wd in list(watched):
                notify.rm_watch(wd)
            watched.clear()
            for target in targets:
                try:
                    watched[notify.add_watch(str(target), _DIR_EVENTS | _GONE)] = target
                except OSError:
                    continue

        arm()
        self.armed.set()
        poller = select.poll()
        poller.register(notify.fileno(), select.POLLIN)
        poller.register(self._wake_r, select.POLLIN)
        while not self._closed.is_set():
            if not poller.poll(None if watched else int(self.fallback_s * 1000)):
                arm()  # nothing could be watched (no folder above exists?): look again later
                continue
            events = notify.read()
            # Let the burst finish (the supervisor writes its record, then a neighbour file).
            while not self._closed.is_set() and poller.poll(int(self.settle_s * 1000)):
                events += notify.read()
            if self._closed.is_set():
                return
            # Events of watches arm() removed (their IN_IGNORED above all) say nothing any more.
            events = [e for e in events if e.wd in watched]
            if any(e.mask & (_GONE | ino.IN_Q_OVERFLOW) or watched.get(e.wd) not in folders for e in events):
                arm()  # a folder appeared (or went): watch what exists now
            if events:
                yield

    def _poll_mtimes(self) -> Iterator[None]:
        def stamp() -> tuple[int, ...]:
            out = []
            for name in WATCHED:
                try:
                    out.append(os.stat(self.root / name).st_mtime_ns)
                except OSError:
                    out.append(0)
            return tuple(out)

        last = stamp()
        self.armed.set()
        while not self._closed.wait(self.fallback_s):
            now = stamp()
            if now != last:
                last = now
                yield

"""Follow a growing log file (vLLM's output) and hand out complete lines in batches.

- A partial last line is held back until its newline arrives (or `flush()` at the end).
- Truncation (size below our position) restarts from the top; rotation (the path now names a
  different file) finishes the old file, then follows the new one from its start.
- Bounded memory: the last `keep` lines in a ring buffer (`recent`), reads in fixed-size chunks,
  and a line that never ends is cut at `max_line_bytes`.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Iterator


class LogTail:
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keep: int = 5000,
        from_start: bool = True,
        chunk_bytes: int = 1 << 20,
        max_line_bytes: int = 1 << 16,
    ) -> None:
        self.path = os.fspath(path)
        self.recent: deque[str] = deque(maxlen=keep)
        self.from_start = from_start
        self.chunk_bytes = chunk_bytes
        self.max_line_bytes = max_line_bytes
        self.lines_read = 0
        self.bytes_read = 0
        self.restarts = 0  # truncations and rotations seen
        self._fd: int | None = None
        self._ino: int | None = None
        self._pos = 0
        self._partial = b""

    # -- file handling

    def _open(self, at_end: bool) -> bool:
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        st = os.fstat(fd)
        self._fd, self._ino = fd, st.st_ino
        self._pos = st.st_size if at_end else 0
        self._partial = b""
        return True

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> LogTail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _replaced(self) -> bool:
        """The path now names another file (rotated), or none at all."""
        try:
            return os.stat(self.path).st_ino != self._ino
        except FileNotFoundError:
            return False  # removed but not replaced yet: keep reading what we have

    # -- reading

    def _split(self, data: bytes) -> list[str]:
        data = self._partial + data
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            lines: list[str] = []
        else:
            self._partial = data[cut + 1 :]
            lines = data[:cut].decode("utf-8", "replace").split("\n")
        while len(self._partial) > self.max_line_bytes:
            # a line that never ends (a runaway progress bar): hand it out in pieces
            piece, self._partial = self._partial[: self.max_line_bytes], self._partial[self.max_line_bytes :]
            lines.append(piece.decode("utf-8", "replace"))
        return lines

    def poll(self, max_bytes: int | None = None) -> list[str]:
        """Complete lines added since the last call.

        Reads at most about `max_bytes` (default: 4 chunks) so one batch stays bounded; call again
        while it returns lines to catch up with a big file.
        """
        if self._fd is None:
            opened = self._open(at_end=not self.from_start)
            self.from_start = True  # a file that appears later (or after a rotation) is read from its start
            if not opened:
                return []
        out: list[str] = []
        budget = max_bytes if max_bytes is not None else 4 * self.chunk_bytes
        fd = self._fd
        assert fd is not None  # opened above
        while budget > 0:
            if os.fstat(fd).st_size < self._pos:  # truncated in place
                self._pos, self._partial = 0, b""
                self.restarts += 1
            data = os.pread(fd, min(self.chunk_bytes, budget), self._pos)
            if data:
                self._pos += len(data)
                self.bytes_read += len(data)
                budget -= len(data)
                out.extend(self._split(data))
                continue
            if self._replaced():
                out.extend(self._take_partial())
                self.close()
                self.restarts += 1
                if not self._open(at_end=False):
                    break
                continue
            break
        if out:
            self.lines_read += len(out)
            self.recent.extend(out)
        return out

    def _take_partial(self) -> list[str]:
        if not self._partial:
            return []
        line = self._partial.decode("utf-8", "replace")
        self._partial = b""
        return [line]

    def flush(self) -> list[str]:
        """The held-back partial last line, if any (call when the writer has exited)."""
        lines = self._take_partial()
        if lines:
            self.lines_read += 1
            self.recent.extend(lines)
        return lines

    def drain(self) -> list[str]:
        """Everything left, the partial last line included (the writer has exited)."""
        rest: list[str] = []
        while batch := self.poll():
            rest.extend(batch)
        return rest + self.flush()

    def follow(self, *, interval_s: float = 0.1, stop: threading.Event | None = None) -> Iterator[list[str]]:
        """Yield non-empty batches of lines until `stop` is set (then the rest, partial line included)."""
        stop = stop or threading.Event()
        while not stop.is_set():
            batch = self.poll()
            if batch:
                yield batch
            else:
                stop.wait(interval_s)
        while batch := self.poll():  # the writer is done: catch up, batch by batch
            yield batch
        if rest := self.flush():
            yield rest

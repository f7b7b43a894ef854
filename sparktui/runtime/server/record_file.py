"""The supervisor's state file: the record rewritten atomically (state.write_state), 0600 in a
0700 folder. A failed write (a full disk, the state dir deleted) is said once and retried on the
next tick; the guard never waits on it, and the reaper is handed a final record the disk refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sparktui.runtime.records import protocol as pr
from sparktui.runtime.records import state as st


class RecordFile:
    def __init__(self, path: Path, say: Callable[[str], None]) -> None:
        self.path = path
        self.unsaved = False  # a state write failed (ENOSPC…): retried on the next tick
        self._say = say

    def write(self, record: pr.StateRecord) -> bool:
        """True when the record reached the disk."""
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            st.write_state(self.path, record)
        except OSError as exc:
            if not self.unsaved:
                self._say(f"warning: cannot write the state file {self.path}: {exc}; retrying")
            self.unsaved = True
            return False
        if self.unsaved:
            self._say(f"the state file {self.path} is written again")
        self.unsaved = False
        return True

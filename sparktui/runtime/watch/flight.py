"""The flight recorder: a fixed-size ring of once-a-second records on disk, so that after a hard reset the last
minutes are there; and the boot id that tells a reboot happened."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.atomic import atomic_write_text
from sparktui.errors import UserError
from sparktui.files import read_regular

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    pass


BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
BOOT_ID_ENV = "SPARKTUI_BOOT_ID"  # tests simulate a reboot by changing it


def current_boot_id() -> str:
    """This boot's id ($SPARKTUI_BOOT_ID overrides it, for tests that simulate a reboot)."""
    override = os.environ.get(BOOT_ID_ENV)
    if override:
        return override
    try:
        return Path(BOOT_ID_FILE).read_text().strip()
    except OSError:
        return ""


# ---------------------------------------------------------------- flight recorder

SLOT_BYTES = 1024
SLOTS = 180  # three minutes at one record a second: 180 KiB, always
RECORD_FILE_LIMIT = 1 << 20  # a header or a post-mortem is a few KiB: a larger file is not one of ours
LOG_LINES = 3
LOG_LINE_CHARS = 200


@dataclass
class FlightHeader:
    """Who the ring belongs to; rewritten (atomically) at start and at a clean stop only."""

    port: int
    profile: str
    model: str
    boot_id: str
    started_at: float
    supervisor_pid: int
    slots: int = SLOTS
    slot_bytes: int = SLOT_BYTES
    clean_stop: bool = False
    stopped_at: float | None = None
    postmortem: str | None = None  # the post-mortem file written after a reboot (reported once)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlightHeader:
        """TypeError or ValueError where a field is missing or of the wrong type (a damaged file)."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        header = cls(**known)
        whole = (header.port, header.supervisor_pid, header.slots, header.slot_bytes)
        if not all(type(n) is int for n in whole) or not (
            0 < header.slots <= 1 << 16 and 0 < header.slot_bytes <= 1 << 20
        ):
            raise ValueError(f"flight header: port, supervisor_pid, slots, slot_bytes {whole}: expected whole numbers")
        for when in (header.started_at, header.stopped_at or 0.0):
            if type(when) not in (int, float) or not math.isfinite(when):
                raise ValueError(f"flight header: a time of {when!r}")
        return header


@dataclass(frozen=True)
class FlightRecord:
    seq: int
    t: float  # wall-clock time
    avail: int  # MemAvailable, bytes
    total: int  # MemTotal, bytes
    psi_some: float | None  # avg10, %
    psi_full: float | None
    phase: str
    status: str
    tree_rss: int | None  # bytes: RSS of the server's process tree
    running: float | None = None
    prefilling: float | None = None
    wedge: str | None = None
    log: list[str] = field(default_factory=list)

    def encode(self, size: int) -> bytes:
        """One slot: compact JSON padded with spaces to `size - 1`, then a newline. Log lines are
        dropped from the oldest until it fits."""
        d = asdict(self)
        d["log"] = [line[:LOG_LINE_CHARS] for line in self.log]
        while True:
            raw = json.dumps(d, separators=(",", ":"), ensure_ascii=True).encode()
            if len(raw) < size or not d["log"]:
                break
            d["log"] = d["log"][1:]
        raw = raw[: size - 1]
        return raw + b" " * (size - 1 - len(raw)) + b"\n"

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FlightRecord:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def flight_dir(state_dir: Path) -> Path:
    path = state_dir / "flight"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


class FlightRecorder:
    """A ring of fixed-size slots in one preallocated file: the file never grows."""

    def __init__(self, folder: Path, header: FlightHeader) -> None:
        self.folder = folder
        self.header = header
        self.ring_path = folder / f"{header.port}.ring"
        self.header_path = folder / f"{header.port}.json"
        self.seq = 0
        self._fd: int | None = None
        self._synced_at = 0.0

    def open(self) -> None:
        self._write_header()
        fd = os.open(self.ring_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        size = self.header.slots * self.header.slot_bytes
        os.pwrite(fd, b"\0" * size, 0)  # written out whole: the blocks exist before they are needed
        os.fsync(fd)
        self._fd = fd

    def append(self, record: FlightRecord, now: float | None = None) -> None:
        if self._fd is None:
            return
        slot = record.seq % self.header.slots
        os.pwrite(self._fd, record.encode(self.header.slot_bytes), slot * self.header.slot_bytes)
        now = time.monotonic() if now is None else now
        if now - self._synced_at >= 1.0:  # at most once a second
            os.fdatasync(self._fd)
            self._synced_at = now

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def close(self, *, clean: bool) -> None:
        if self._fd is not None:
            try:
                os.fdatasync(self._fd)
            finally:
                os.close(self._fd)
                self._fd = None
        if clean:
            self.header.clean_stop = True
            self.header.stopped_at = time.time()
            self._write_header()

    def _write_header(self) -> None:
        atomic_write_text(self.header_path, json.dumps(asdict(self.header), indent=1), private=True)


def read_ring(path: Path, slot_bytes: int = SLOT_BYTES) -> list[FlightRecord]:
    """Every intact record in a ring file, oldest first (a torn slot is skipped)."""
    try:  # read_regular: a FIFO there hangs nothing
        data = read_regular(path, SLOTS * slot_bytes * 2, "flight ring")
    except (OSError, UserError):
        return []
    out = []
    for i in range(0, len(data), slot_bytes):
        chunk = data[i : i + slot_bytes].strip(b"\0 \n")
        if not chunk:
            continue
        try:
            out.append(FlightRecord.from_dict(json.loads(chunk)))
        except (ValueError, TypeError, RecursionError):  # RecursionError: a torn slot of '[[[…'
            continue
    return sorted(out, key=lambda r: r.seq)

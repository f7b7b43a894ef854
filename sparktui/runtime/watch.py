"""Watching a server for what the memory guard cannot see, and leaving a trace when all else fails.

- `WedgeDetector` (pure): a server is suspect when requests are running but nothing moves for
  `wedge-after-s`. The supervisor then sends a 1-token probe with its own timeout; a probe that
  gets no answer confirms the wedge. A long prefill is not a wedge: vLLM 0.32 counts a request's
  prompt tokens (`vllm:prompt_tokens_total`) and its first token only when the prefill ends, so
  during a prefill the generation counter is still; what moves is the KV-cache usage as chunked
  prefill allocates blocks chunk by chunk. Requests without a first token yet are told apart
  from decoding ones by the TTFT histogram's count less the finished requests.
- `CrashLoopBreaker` (pure): automatic restarts stop after N failures in the same phase within
  a window.
- `FlightRecorder`: once a second while a server runs, a compact record (MemAvailable, PSI,
  phase, tree memory, last log lines) goes into a fixed-size ring file, fdatasync'd at most once
  a second, so that after a hard reset the last minutes are on disk.
- Post-mortem: at the next start of any sparktui command (or `sparktui postmortem`), a flight
  record whose boot id is not this boot's and that has no clean stop is analysed: memory
  trajectory, phase, last log lines, kernel messages of the previous boot, a verdict.
- Page cache without root: how much of the model's files the page cache holds (mincore through
  mmap) and evicting exactly those pages with posix_fadvise(DONTNEED).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import mmap
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.atomic import atomic_write_text
from sparktui.core.units import GiB

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    from sparktui.core.metrics import MetricsSnapshot

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
BOOT_ID_ENV = "SPARKTUI_BOOT_ID"  # tests simulate a reboot by changing it
FINISHED = "vllm:request_success_total"

# ---------------------------------------------------------------- wedge detector


@dataclass(frozen=True)
class EngineCounters:
    """The figures of one /metrics snapshot the wedge detector needs."""

    t: float  # monotonic seconds
    running: float
    waiting: float
    generation_tokens: float
    prompt_tokens: float
    first_tokens: float  # requests that got their first token (TTFT histogram count)
    finished: float  # requests finished, for any reason
    kv_usage: float | None  # 0..1

    @classmethod
    def from_snapshot(cls, snapshot: MetricsSnapshot) -> EngineCounters:
        from sparktui.core.metrics import GENERATION_TOKENS, KV_USAGE, PROMPT_TOKENS, RUNNING, TTFT, WAITING

        kv = None
        for name in KV_USAGE:
            kv = snapshot.mean(name)
            if kv is not None:
                break
        return cls(
            t=snapshot.time,
            running=snapshot.total(RUNNING) or 0.0,
            waiting=snapshot.total(WAITING) or 0.0,
            generation_tokens=snapshot.total(GENERATION_TOKENS) or 0.0,
            prompt_tokens=snapshot.total(PROMPT_TOKENS) or 0.0,
            first_tokens=snapshot.total(TTFT + "_count") or 0.0,
            finished=snapshot.total(FINISHED) or 0.0,
            kv_usage=kv,
        )

    @property
    def decoding(self) -> float:
        """Running requests past their first token (an aborted request never had one: clamp)."""
        return max(0.0, min(self.running, self.first_tokens - self.finished))

    @property
    def prefilling(self) -> float:
        return max(0.0, self.running - self.decoding)

    def progress_key(self) -> tuple[float, ...]:
        """Any change in these is the engine doing work."""
        return (self.generation_tokens, self.prompt_tokens, self.first_tokens, self.finished, self.kv_usage or 0.0)


class WedgeState(StrEnum):
    IDLE = "idle"  # no request running
    OK = "ok"  # tokens moving
    PREFILLING = "prefilling"  # only requests in prefill, still within the prefill allowance
    SUSPECT = "suspect"  # nothing moved for wedge-after-s: probe it
    WEDGED = "wedged"  # the probe got no answer


@dataclass(frozen=True)
class WedgeView:
    state: WedgeState
    stalled_s: float  # seconds since the engine last showed progress (0 when idle)
    running: float
    decoding: float
    prefilling: float
    evidence: str | None = None


class WedgeDetector:
    """Fed EngineCounters (any pace); says whether the engine is stalled. No I/O, no clock.

    Decoding requests make a token every engine step, so with one running, `wedge_after_s`
    without a new generated token is a stall. Requests still in prefill get `prefill_after_s`
    (default 4 × wedge_after_s, at least 120 s) without any counter or KV usage moving: one
    unchunked prefill of a long prompt is a single step that shows nothing until it ends.
    """

    def __init__(self, wedge_after_s: float = 30.0, prefill_after_s: float | None = None) -> None:
        self.wedge_after_s = wedge_after_s
        self.prefill_after_s = prefill_after_s if prefill_after_s is not None else max(4 * wedge_after_s, 120.0)
        self.last: EngineCounters | None = None
        self.progress_at: float | None = None  # monotonic time of the last progress seen
        self.wedged_at: float | None = None  # monotonic time the wedge was confirmed
        self.evidence: str | None = None

    def observe(self, c: EngineCounters) -> WedgeView:
        moved = self.last is None or c.progress_key() != self.last.progress_key()
        self.last = c
        if c.running <= 0 or moved:
            self.progress_at = c.t
            self.wedged_at, self.evidence = None, None
            state = WedgeState.IDLE if c.running <= 0 else WedgeState.OK
            return WedgeView(state, 0.0, c.running, c.decoding, c.prefilling)
        assert self.progress_at is not None
        stalled = c.t - self.progress_at
        if self.wedged_at is not None:
            state = WedgeState.WEDGED
        elif c.decoding > 0:
            state = WedgeState.SUSPECT if stalled >= self.wedge_after_s else WedgeState.OK
        else:
            state = WedgeState.SUSPECT if stalled >= self.prefill_after_s else WedgeState.PREFILLING
        return WedgeView(state, stalled, c.running, c.decoding, c.prefilling, self.evidence)

    def probe_answered(self, t: float) -> None:
        """A probe got its token: the engine steps (the stalled requests wait on their clients)."""
        self.progress_at = t
        self.wedged_at, self.evidence = None, None

    def confirm(self, t: float, evidence: str) -> None:
        self.wedged_at, self.evidence = t, evidence

    @property
    def wedged(self) -> bool:
        return self.wedged_at is not None


# ---------------------------------------------------------------- crash-loop breaker


@dataclass(frozen=True)
class Failure:
    at: float  # wall-clock time
    phase: str  # the start-up phase reached (or "ready")
    kind: str  # "crash" | "wedge"
    detail: str

    def line(self) -> str:
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))} {self.kind} in {self.phase}: {self.detail}"


@dataclass(frozen=True)
class BreakerVerdict:
    restart: bool
    reason: str | None  # why restarts stopped
    failures: list[Failure]  # the failures that count (same phase, within the window)


class CrashLoopBreaker:
    """Allows automatic restarts until `max_failures` failures in one phase within `window_s`."""

    def __init__(self, max_failures: int = 3, window_s: float = 600.0) -> None:
        self.max_failures = max_failures
        self.window_s = window_s
        self.failures: list[Failure] = []
        self.tripped: BreakerVerdict | None = None

    def record(self, failure: Failure) -> BreakerVerdict:
        self.failures.append(failure)
        same = [f for f in self.failures if f.phase == failure.phase and failure.at - f.at <= self.window_s]
        if len(same) >= self.max_failures:
            reason = (
                f"crash loop: {len(same)} failures in phase {failure.phase} within "
                f"{self.window_s / 60:g} min; not restarting again"
            )
            self.tripped = BreakerVerdict(False, reason, same)
            return self.tripped
        return BreakerVerdict(True, None, same)


# ---------------------------------------------------------------- boot id


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
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)


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
    try:
        data = path.read_bytes()
    except OSError:
        return []
    out = []
    for i in range(0, len(data), slot_bytes):
        chunk = data[i : i + slot_bytes].strip(b"\0 \n")
        if not chunk:
            continue
        try:
            out.append(FlightRecord.from_dict(json.loads(chunk)))
        except (ValueError, TypeError):
            continue
    return sorted(out, key=lambda r: r.seq)


# ---------------------------------------------------------------- post-mortem


class Verdict(StrEnum):
    MEM_LOADING = "memory exhausted while loading"
    MEM_PROFILING = "memory exhausted while profiling"
    MEM_PREFILL = "memory exhausted during a long prefill"
    MEM_SERVING = "memory exhausted while serving"
    WEDGE = "wedge"
    UNKNOWN = "unknown"


LOADING_PHASES = ("launching", "starting", "loading_weights")
PROFILING_PHASES = ("profiling", "kv_cache", "cuda_graphs")
EXHAUSTED_BYTES = 4 * GiB  # below this on a Spark the box is in its danger zone (2-3 GB hangs it)
EXHAUSTED_HORIZON_S = 5.0  # a fall that would reach it within this long after the last record counts
KERNEL_PATTERN = re.compile(
    r"NVRM|Xid|Out of memory|oom-kill|oom_reaper|invoked oom-killer|Killed process|hung_task|soft lockup", re.I
)


@dataclass(frozen=True)
class KernelLog:
    readable: bool
    lines: list[str]  # the matching lines only
    why: str | None = None  # why it could not be read


def read_previous_boot_kernel_log(timeout: float = 20.0) -> KernelLog:
    """NVRM / Xid / OOM lines of the previous boot, where `journalctl -k -b -1` can be read."""
    argv = ["journalctl", "-k", "-b", "-1", "--no-pager", "-q", "-o", "short-monotonic"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return KernelLog(False, [], f"journalctl: {exc}")
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return KernelLog(False, [], f"journalctl -k -b -1: {why}")
    return KernelLog(True, kernel_lines(done.stdout.splitlines()))


def kernel_lines(lines: Iterable[str], keep: int = 40) -> list[str]:
    found = [line for line in lines if KERNEL_PATTERN.search(line)]
    return found[-keep:]


@dataclass
class PostMortem:
    port: int
    profile: str
    model: str
    boot_id: str  # the boot that ended
    started_at: float
    last_record_at: float | None
    phase: str | None
    verdict: Verdict
    why: str  # the evidence for the verdict, in words
    trajectory: list[tuple[float, float, float | None]]  # (seconds before the last record, GiB, PSI full)
    last_log: list[str]
    kernel: KernelLog
    low_gib: float | None
    records: int

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict.value
        return d

    def render(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.last_record_at or self.started_at))
        out = [
            f"post-mortem: the previous boot ended while {self.profile!r} (port {self.port}, {self.model}) ran; "
            "it was never stopped cleanly",
            f"  verdict: {self.verdict.value}: {self.why}",
            f"  last record {when}, phase {self.phase or 'unknown'}, {self.records} records",
        ]
        if self.trajectory:
            out.append("  MemAvailable in the last minute (s before the end: GiB, PSI full avg10):")
            step = max(1, len(self.trajectory) // 12)
            shown = self.trajectory[::step]
            if shown[-1] != self.trajectory[-1]:
                shown.append(self.trajectory[-1])
            out.append(
                "    "
                + "  ".join(f"-{ago:.0f}s:{gib:.1f}" + (f"/{psi:.0f}%" if psi else "") for ago, gib, psi in shown)
            )
        if self.last_log:
            out.append("  last log lines:")
            out.extend(f"    {line}" for line in self.last_log)
        if self.kernel.readable:
            if self.kernel.lines:
                out.append("  kernel messages of that boot (NVRM, Xid, OOM):")
                out.extend(f"    {line}" for line in self.kernel.lines[-15:])
            else:
                out.append("  kernel messages of that boot: no NVRM, Xid or OOM lines")
        else:
            out.append(f"  kernel messages of that boot: not readable ({self.kernel.why})")
        return "\n".join(out)


def _fall_rate(records: Sequence[FlightRecord], seconds: float = 5.0) -> float:
    """Bytes/s MemAvailable fell over the last `seconds` of records (negative = rose)."""
    if len(records) < 2:
        return 0.0
    last = records[-1]
    first = next((r for r in records if last.t - r.t <= seconds), records[-2])
    if last.t <= first.t:
        return 0.0
    return (first.avail - last.avail) / (last.t - first.t)


def analyse(header: FlightHeader, records: Sequence[FlightRecord], kernel: KernelLog) -> PostMortem:
    """The verdict from a flight record and the previous boot's kernel lines."""
    last = records[-1] if records else None
    minute = [r for r in records if last is not None and last.t - r.t <= 60.0]
    trajectory = [(round(last.t - r.t, 1), round(r.avail / GiB, 2), r.psi_full) for r in minute] if last else []
    low = min((r.avail for r in minute), default=None)
    oom = [line for line in kernel.lines if re.search(r"out of memory|oom", line, re.I)]
    verdict, why = Verdict.UNKNOWN, "the records show neither a memory collapse nor a wedge"
    if last is not None:
        rate = _fall_rate(minute)
        projected = last.avail - max(rate, 0.0) * EXHAUSTED_HORIZON_S
        exhausted = []
        if low is not None and low < EXHAUSTED_BYTES:
            exhausted.append(f"MemAvailable fell to {low / GiB:.1f} GiB")
        elif projected < EXHAUSTED_BYTES and rate > 0:
            exhausted.append(
                f"MemAvailable {last.avail / GiB:.1f} GiB falling {rate / GiB:.1f} GiB/s at the last record"
            )
        if last.psi_full is not None and last.psi_full >= 20.0:
            exhausted.append(f"memory pressure (PSI full) {last.psi_full:.0f}%")
        if oom:
            exhausted.append("the kernel logged OOM")
        if exhausted:
            phase = last.phase
            if phase in LOADING_PHASES:
                verdict = Verdict.MEM_LOADING
            elif phase in PROFILING_PHASES:
                verdict = Verdict.MEM_PROFILING
            elif (last.prefilling or 0) > 0:
                verdict = Verdict.MEM_PREFILL
            else:
                verdict = Verdict.MEM_SERVING
            why = "; ".join(exhausted) + f" (phase {phase})"
        elif last.wedge in (WedgeState.WEDGED.value, WedgeState.SUSPECT.value):
            verdict = Verdict.WEDGE
            why = f"the engine was {last.wedge}: requests running, no tokens moving; memory was fine"
    return PostMortem(
        port=header.port,
        profile=header.profile,
        model=header.model,
        boot_id=header.boot_id,
        started_at=header.started_at,
        last_record_at=last.t if last else None,
        phase=last.phase if last else None,
        verdict=verdict,
        why=why,
        trajectory=trajectory,
        last_log=list(last.log) if last else [],
        kernel=kernel,
        low_gib=round(low / GiB, 2) if low is not None else None,
        records=len(records),
    )


def _headers(folder: Path) -> list[tuple[Path, FlightHeader]]:
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            out.append((path, FlightHeader.from_dict(json.loads(path.read_text()))))
        except (OSError, ValueError, TypeError):
            continue
    return out


def _end_recorded(state_dir: Path, header: FlightHeader) -> bool:
    """The run's end is in its state record after all (its supervisor was killed and the reaper
    or the next launch swept the tree): not a machine that went down under it."""
    try:
        state = json.loads((state_dir / "servers" / f"{header.port}.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(state.get("status") == "exited" and (state.get("started_at") or 0) >= header.started_at - 1)


def check_after_reboot(
    state_dir: Path,
    *,
    boot_id: str | None = None,
    kernel: Callable[[], KernelLog] = read_previous_boot_kernel_log,
) -> list[PostMortem]:
    """Post-mortems for servers that ran when an earlier boot ended (each reported once).

    A flight header without a clean stop whose boot id is not this boot's: the machine went down
    under it. Each post-mortem is saved next to the ring and the header marked, so the next
    command does not report it again; `sparktui postmortem` shows the saved ones.
    """
    folder = flight_dir(state_dir)
    now_boot = current_boot_id() if boot_id is None else boot_id
    found = []
    kernel_log: KernelLog | None = None
    for path, header in _headers(folder):
        if header.clean_stop or header.postmortem or header.boot_id == now_boot:
            continue
        if _end_recorded(state_dir, header):
            continue
        if kernel_log is None:
            kernel_log = kernel()
        records = read_ring(folder / f"{header.port}.ring", header.slot_bytes)
        pm = analyse(header, records, kernel_log)
        saved = folder / f"postmortem-{header.port}-{int(header.started_at)}.json"
        atomic_write_text(saved, json.dumps(pm.to_dict(), indent=1), private=True)
        header.postmortem = str(saved)
        atomic_write_text(path, json.dumps(asdict(header), indent=1), private=True)
        found.append(pm)
    return found


def saved_postmortems(state_dir: Path) -> list[dict[str, Any]]:
    """Every saved post-mortem, newest first."""
    out = []
    for path in flight_dir(state_dir).glob("postmortem-*.json"):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda d: d.get("last_record_at") or d.get("started_at") or 0, reverse=True)


def postmortem_from_dict(d: dict[str, Any]) -> PostMortem:
    k = d.get("kernel") or {}
    return PostMortem(
        port=d["port"],
        profile=d["profile"],
        model=d["model"],
        boot_id=d["boot_id"],
        started_at=d["started_at"],
        last_record_at=d.get("last_record_at"),
        phase=d.get("phase"),
        verdict=Verdict(d["verdict"]),
        why=d.get("why", ""),
        trajectory=[(a, b, c) for a, b, c in d.get("trajectory", [])],
        last_log=list(d.get("last_log", [])),
        kernel=KernelLog(bool(k.get("readable")), list(k.get("lines", [])), k.get("why")),
        low_gib=d.get("low_gib"),
        records=int(d.get("records", 0)),
    )


# ---------------------------------------------------------------- page cache without root

_PAGE = mmap.PAGESIZE
_WINDOW = 1 << 30  # mincore a file a GiB at a time: the vector stays small (256 KiB)
_LOW_BIT = bytes(b & 1 for b in range(256))


def _libc() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return lib


_libc_handle: ctypes.CDLL | None = None
_MAP_FAILED = ctypes.c_void_p(-1).value


def resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache now: mmap (no page is touched) then mincore."""
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = _libc()
    libc = _libc_handle
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        pages = 0
        for offset in range(0, size, _WINDOW):
            length = min(_WINDOW, size - offset)
            addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_SHARED, fd, offset)
            if addr is None or addr == _MAP_FAILED:
                raise OSError(ctypes.get_errno(), f"mmap {path}: {os.strerror(ctypes.get_errno())}")
            try:
                vec = ctypes.create_string_buffer((length + _PAGE - 1) // _PAGE)
                if libc.mincore(addr, length, vec) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore {path}: {os.strerror(ctypes.get_errno())}")
                pages += vec.raw.translate(_LOW_BIT).count(1)
            finally:
                libc.munmap(addr, length)
        return min(size, pages * _PAGE)
    finally:
        os.close(fd)


def evict_file(path: Path) -> None:
    """Drop the file's clean pages from the page cache (no root needed: any reader may)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def model_folder(model: str) -> Path | None:
    """The local folder holding the model's files: the path given, or its Hugging Face cache snapshot."""
    path = Path(model).expanduser()
    try:
        if path.is_dir():
            return path
        if path.is_file():
            return path.parent
    except OSError:  # a name too long for a path, a loop of links: not a local folder
        pass
    from sparktui.core.modelspec.lookup import hub_dirs, hub_snapshot

    return hub_snapshot(model, hub_dirs())


def model_files(folder: Path) -> list[Path]:
    """Regular files under the folder (HF cache symlinks resolved to their blobs, each once)."""
    seen: dict[Path, None] = {}
    for path in sorted(folder.rglob("*")):
        try:
            real = path.resolve()
            if real.is_file():
                seen.setdefault(real, None)
        except OSError:
            continue
    return list(seen)


@dataclass(frozen=True)
class FileCache:
    path: str
    size: int
    resident_before: int
    resident_after: int
    measured: bool = True  # False: mincore cannot see this file's pages (see `measurable`)


def measurable(path: Path) -> bool:
    """mincore reports a file's real residency only to its owner or a user who may write it;
    to anyone else it says every page is resident (Linux 5.0, against page-cache side channels)."""
    try:
        return path.stat().st_uid == os.geteuid() or os.access(path, os.W_OK)
    except OSError:
        return False


@dataclass
class PageCacheReport:
    folder: str | None
    files: list[FileCache]
    seconds: float
    evicted: bool
    errors: list[str] = field(default_factory=list)

    @property
    def before(self) -> int:
        return sum(f.resident_before for f in self.files if f.measured)

    @property
    def after(self) -> int:
        return sum(f.resident_after for f in self.files if f.measured)

    @property
    def unmeasured(self) -> int:
        return sum(1 for f in self.files if not f.measured)

    @property
    def freed(self) -> int:
        return max(0, self.before - self.after)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(before=self.before, after=self.after, freed=self.freed)
        return d

    def summary(self) -> str:
        if self.folder is None:
            return "page cache: the model is not a local folder; nothing to measure"
        mib = 1 << 20
        blind = (
            f"; {self.unmeasured} file(s) neither yours nor writable: their pages cannot be counted"
            + (" (evicted all the same)" if self.evicted else "")
            if self.unmeasured
            else ""
        )
        if not self.evicted:
            return f"page cache: the model's files hold {self.before / mib:,.0f} MiB{blind}"
        return (
            f"page cache: the model's files held {self.before / mib:,.0f} MiB; evicted "
            f"{self.freed / mib:,.0f} MiB in {self.seconds * 1000:.0f} ms without root "
            f"({self.after / mib:,.0f} MiB left){blind}"
        )


def model_page_cache(model: str, *, evict: bool) -> PageCacheReport:
    """Measure (and with evict=True, evict) the page cache held by the model's own files."""
    started = time.monotonic()
    folder = model_folder(model)
    if folder is None:
        return PageCacheReport(None, [], 0.0, evict)
    files, errors = [], []
    for path in model_files(folder):
        try:
            size = path.stat().st_size
            seen = measurable(path)
            before = resident_bytes(path) if size and seen else 0
            after = before
            if evict and (before or not seen):
                evict_file(path)
                after = resident_bytes(path) if seen else 0
            files.append(FileCache(str(path), size, before, after, seen))
        except OSError as exc:
            errors.append(f"{path}: {exc.strerror or exc}")
    return PageCacheReport(str(folder), files, time.monotonic() - started, evict, errors)


# ---------------------------------------------------------------- the supervisor's side


@dataclass(frozen=True)
class ProbeResult:
    answered: bool  # a token came back
    conclusive: bool  # False: the probe could not be made (a 4xx: wrong model name, no key)
    detail: str
    seconds: float


def probe_completion(url: str, api_key: str | None, model: str, timeout: float) -> ProbeResult:
    """Ask for one token, with its own timeout. The API server answers /health and /v1/models by
    itself; only a completion needs the engine to step."""
    import httpx

    started = time.monotonic()
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout, headers=headers, trust_env=False) as client:
            try:
                listed = client.get(url + "/v1/models").json().get("data") or []
                model = str(listed[0]["id"]) if listed else model
            except (httpx.HTTPError, ValueError, KeyError, IndexError, AttributeError):
                pass
            remaining = max(0.5, timeout - (time.monotonic() - started))
            reply = client.post(
                url + "/v1/completions",
                json={"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0},
                timeout=remaining,
            )
    except httpx.TimeoutException:
        return ProbeResult(False, True, f"no token within {timeout:g} s", time.monotonic() - started)
    except httpx.HTTPError as exc:
        return ProbeResult(False, True, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
    seconds = time.monotonic() - started
    if reply.status_code == 200:
        return ProbeResult(True, True, f"answered in {seconds:.2f} s", seconds)
    conclusive = reply.status_code >= 500
    return ProbeResult(False, conclusive, f"HTTP {reply.status_code}", seconds)


def gpu_evidence() -> str:
    """GPU utilization and power, where NVML gives them: an idle GPU under running requests
    supports a wedge; a busy one says a kernel is spinning."""
    from sparktui.runtime.memory import read_gpu

    report = read_gpu(processes=False)
    if not report.available:
        return f"GPU figures unavailable ({report.reason})"
    parts = []
    for g in report.gpus:
        util = "n/a" if g.utilization_pct is None else f"{g.utilization_pct}%"
        power = "n/a" if g.power_w is None else f"{g.power_w:.0f} W"
        parts.append(f"GPU {g.index}: utilization {util}, power {power}")
    return "; ".join(parts)


class ServerWatch:
    """What the supervisor hooks in: wedge detection and its probe, the restart breaker, the
    flight recorder. Thread-safe where the supervisor calls it from several threads."""

    def __init__(
        self,
        settings: Any,  # core.profiles.WatchSettings
        *,
        url: str,
        api_key: str | None,
        model: str,
        say: Callable[[str], None],
        evidence: Callable[[], str] = gpu_evidence,
    ) -> None:
        import threading
        from collections import deque

        self.settings = settings
        self.url, self.api_key, self.model = url, api_key, model
        self.say = say
        self.evidence = evidence
        self.detector = WedgeDetector(float(settings.wedge_after_s))
        self.breaker = CrashLoopBreaker(int(settings.max_failures), float(settings.failure_window_s))
        self.view: WedgeView | None = None
        self.wedged_since: float | None = None  # wall-clock time the engine last made progress
        self.probes = 0
        self.last_probe: ProbeResult | None = None
        self.restart_wanted = threading.Event()
        self.restarts: list[dict[str, Any]] = []
        self.log_lines: deque[str] = deque(maxlen=LOG_LINES)
        self.recorder: FlightRecorder | None = None
        self._lock = threading.Lock()
        self._probing: threading.Thread | None = None
        self._stop = threading.Event()
        self._recording: threading.Thread | None = None
        self.record_cost_s = 0.0  # total time spent making and writing records
        self.records = 0

    # -- wedge

    def on_line(self, line: str) -> None:
        self.log_lines.append(line.rstrip()[:LOG_LINE_CHARS])

    def on_metrics(self, snapshot: MetricsSnapshot) -> bool:
        """Feed one /metrics snapshot; True when the wedge state changed (save the state)."""
        with self._lock:
            before = self.view.state if self.view else None
            view = self.detector.observe(EngineCounters.from_snapshot(snapshot))
            self.view = view
            if view.state not in (WedgeState.WEDGED, WedgeState.SUSPECT):
                self.wedged_since = None
            if view.state is WedgeState.SUSPECT and (self._probing is None or not self._probing.is_alive()):
                import threading

                self._probing = threading.Thread(target=self._probe, name="sparktui-wedge-probe", daemon=True)
                self._probing.start()
            if before is WedgeState.WEDGED and view.state is not WedgeState.WEDGED:
                self.say("the engine moves again: no longer wedged")
            return before != view.state

    def _probe(self) -> None:
        with self._lock:
            view = self.view
        self.say(
            f"suspect: {view.running if view else 0:.0f} request(s) running and no progress for "
            f"{view.stalled_s if view else 0:.0f} s; probing with a 1-token request"
        )
        result = probe_completion(self.url, self.api_key, self.model, float(self.settings.probe_timeout_s))
        self.probes += 1
        self.last_probe = result
        now = time.monotonic()
        with self._lock:
            if result.answered:
                self.detector.probe_answered(now)
                self.say(f"probe {result.detail}: not wedged")
            elif not result.conclusive:
                self.detector.probe_answered(now)  # cannot tell: wait a full period before asking again
                self.say(f"probe inconclusive ({result.detail}); not calling it a wedge")
            else:
                evidence = f"probe: {result.detail}; {self.evidence()}"
                self.detector.confirm(now, evidence)
                progress_at = self.detector.progress_at if self.detector.progress_at is not None else now
                self.wedged_since = time.time() - (now - progress_at)
                self.view = WedgeView(
                    WedgeState.WEDGED,
                    now - progress_at,
                    view.running if view else 0,
                    view.decoding if view else 0,
                    view.prefilling if view else 0,
                    evidence,
                )
                since = time.strftime("%H:%M:%S", time.localtime(self.wedged_since))
                self.say(f"WEDGED since {since}: {evidence}")
                if "wedge" in self.settings.restart_on:
                    self.restart_wanted.set()

    @property
    def prefilling(self) -> bool:
        view = self.view
        return view is not None and view.prefilling > 0

    @property
    def stalled(self) -> bool:
        """Requests run and neither prefill nor decode moved since the last scrape (the guard, with a
        fall of MemAvailable, takes it for a driver failure under way: runtime/guard.py ALERT_*)."""
        view = self.view
        return view is not None and view.running > 0 and view.stalled_s > 0

    # -- restarts

    def may_restart(self, kind: str, phase: str, detail: str) -> BreakerVerdict | None:
        """After a failure of `kind` ("wedge" | "crash"): None when the profile does not ask for a
        restart; else the breaker's verdict."""
        if kind not in self.settings.restart_on:
            return None
        verdict = self.breaker.record(Failure(time.time(), phase, kind, detail))
        if verdict.restart:
            self.restarts.append({"at": time.time(), "kind": kind, "phase": phase, "detail": detail})
        return verdict

    def reset_for_restart(self) -> None:
        with self._lock:
            self.detector = WedgeDetector(float(self.settings.wedge_after_s))
            self.view, self.wedged_since = None, None
            self.restart_wanted.clear()

    # -- flight recorder

    def start_recording(
        self, folder: Path, header: FlightHeader, context: Callable[[], tuple[str, str, list[int]]]
    ) -> None:
        """Append a record once a second from a thread; context() gives (phase, status, pids)."""
        import threading

        if not self.settings.flight_recorder:
            return
        recorder = FlightRecorder(folder, header)
        try:
            recorder.open()
        except OSError as exc:
            self.say(f"flight recorder off: {exc}")
            return
        self.recorder = recorder

        def loop() -> None:
            next_at = time.monotonic()
            while not self._stop.wait(max(0.0, next_at - time.monotonic())):
                next_at += 1.0
                try:
                    self.record_once(context)
                except OSError:
                    pass  # a full disk must not take the supervisor down

        self._recording = threading.Thread(target=loop, name="sparktui-flight", daemon=True)
        self._recording.start()

    def record_once(self, context: Callable[[], tuple[str, str, list[int]]], now: float | None = None) -> None:
        from sparktui.runtime.memory import read_memory, rss_bytes

        if self.recorder is None:
            return
        started = time.perf_counter()
        phase, status, pids = context()
        mem = read_memory(psi=True)
        rss = [rss_bytes(pid) for pid in pids]
        view = self.view
        record = FlightRecord(
            seq=self.recorder.next_seq(),
            t=time.time(),
            avail=mem.mem_available,
            total=mem.mem_total,
            psi_some=mem.psi_some_avg10,
            psi_full=mem.psi_full_avg10,
            phase=phase,
            status=status,
            tree_rss=sum(r for r in rss if r is not None) if pids else None,
            running=view.running if view else None,
            prefilling=view.prefilling if view else None,
            wedge=view.state.value if view else None,
            log=list(self.log_lines),
        )
        self.recorder.append(record, now)
        self.record_cost_s += time.perf_counter() - started
        self.records += 1

    def close(self, *, clean: bool) -> None:
        self._stop.set()
        if self._recording is not None:
            self._recording.join(2.0)
        if self.recorder is not None:
            try:
                self.recorder.close(clean=clean)
            except OSError:
                pass

    # -- state

    def to_state(self) -> dict[str, Any]:
        view = self.view
        breaker = self.breaker.tripped
        return {
            "wedge": {
                "state": view.state.value if view else "idle",
                "since": self.wedged_since,
                "stalled_s": round(view.stalled_s, 1) if view else 0.0,
                "running": view.running if view else None,
                "prefilling": view.prefilling if view else None,
                "evidence": view.evidence if view else None,
                "after_s": self.settings.wedge_after_s,
                "probes": self.probes,
            },
            "restarts": list(self.restarts),
            "breaker": None
            if breaker is None
            else {"reason": breaker.reason, "failures": [asdict(f) for f in breaker.failures]},
            "flight_recorder": str(self.recorder.ring_path) if self.recorder else None,
        }

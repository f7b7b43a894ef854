"""Post-mortems: a flight record from an earlier boot with no clean stop, analysed (memory trajectory, phase,
last log lines, the previous boot's kernel messages) into a verdict."""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparktui.atomic import atomic_write_text
from sparktui.core.units import GiB
from sparktui.errors import UserError
from sparktui.files import Untrusted, read_json, read_regular, warn_shared_folder, warn_untrusted
from sparktui.runtime.records.protocol import MAX_STATE_BYTES
from sparktui.runtime.watch.flight import (
    RECORD_FILE_LIMIT,
    FlightHeader,
    FlightRecord,
    current_boot_id,
    flight_dir,
    read_ring,
)
from sparktui.runtime.watch.wedge import WedgeState

if TYPE_CHECKING:  # every command checks for a post-mortem: keep prometheus_client out of that path
    pass


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
    warn_shared_folder(folder, "flight record")  # a post-mortem is only reported: nothing is ended from it
    for path in sorted(folder.glob("*.json")):
        try:  # read_json: a FIFO there hangs nothing, '[[[…' is no RecursionError
            out.append((path, FlightHeader.from_dict(read_json(path, RECORD_FILE_LIMIT, "flight header"))))
        except (OSError, UserError, ValueError, TypeError):
            continue
    return out


def _end_recorded(state_dir: Path, header: FlightHeader) -> bool:
    """The run's end is in its state record after all (its supervisor was killed and the reaper
    or the next launch swept the tree): not a machine that went down under it."""
    try:  # own: a record another user owns or may write could hide a crash (files.own_file_problem)
        state = json.loads(
            read_regular(state_dir / "servers" / f"{header.port}.json", MAX_STATE_BYTES, "state record", own=True)
        )
    except Untrusted as exc:
        warn_untrusted(exc, f"the run on port {header.port} is reported as if no end were recorded")
        return False
    except (OSError, UserError, ValueError, RecursionError):
        return False
    return isinstance(state, dict) and bool(
        state.get("status") == "exited" and (state.get("started_at") or 0) >= header.started_at - 1
    )


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
    warn_shared_folder(flight_dir(state_dir), "flight record")
    for path in flight_dir(state_dir).glob("postmortem-*.json"):
        try:
            saved = read_json(path, RECORD_FILE_LIMIT, "post-mortem")
        except (OSError, UserError):
            continue
        if isinstance(saved, dict):
            out.append(saved)
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

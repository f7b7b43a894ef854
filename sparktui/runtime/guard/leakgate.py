"""The leak gate: did the memory a server used come back after it ended, and if not, who holds it.

Before a launch, `take_baseline()` records MemAvailable, shared and locked memory and the /dev/shm
files already there; once the tree runs, `with_tree()` adds its members and cgroup. After the
server ends (for any reason), `wait_for_memory_back(baseline)` re-measures every 0.25 s for up to
30 s and answers a `MemoryBack`: came back, or how much did not and what holds it (core/leak.py
says what counts). A model swap (stop one, start the next) calls the same function between the two.

`gate()` is the check before the next launch: a leak recorded on this boot whose holders still
hold more than the threshold refuses the launch (exit 2) with the figure, the holders and the fix.
Cost: nothing while a server runs; a few /proc reads when one ends, a /proc scan only on a leak.
"""

from __future__ import annotations

import dataclasses
import os
import stat as stat_module
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sparktui.core.leak import (
    MEMORY_BACK_TIMEOUT_S,
    Holder,
    LeakRecord,
    leak_threshold,
    leaked_bytes,
    refusal,
)
from sparktui.core.meminfo import kib_field
from sparktui.errors import UserError
from sparktui.runtime.host import proc
from sparktui.runtime.host.memory import read_per_cpu_free

SHM_DIR = Path("/dev/shm")
MEMINFO = Path("/proc/meminfo")
POLL_S = 0.25  # between measurements while waiting for memory to come back
SHM_HOLDER_MIN_BYTES = 1 << 20  # smaller new /dev/shm files are not worth naming
MAX_SHM_HOLDERS = 10
LOCKED_MIN_BYTES = 64 << 20  # Mlocked growth below this is not named


@dataclass(frozen=True)
class MemInfo:
    mem_total: int
    mem_available: int
    shmem: int  # /dev/shm, SysV and memfd shared memory, NCCL's and torch's
    mlocked: int
    # free pages on the kernel's per-CPU lists, which MemAvailable leaves out: right after a tree's
    # teardown they hold up to 1/8 of memory (host.memory.read_per_cpu_free)
    per_cpu_free: int = 0

    @property
    def free_to_use(self) -> int:
        """MemAvailable and the per-CPU free pages: what a new server can take."""
        return self.mem_available + self.per_cpu_free


def read_meminfo(path: Path = MEMINFO) -> MemInfo:
    raw = path.read_bytes()
    return MemInfo(
        mem_total=kib_field(raw, b"MemTotal:") or 0,
        mem_available=kib_field(raw, b"MemAvailable:") or 0,
        shmem=kib_field(raw, b"Shmem:") or 0,
        mlocked=kib_field(raw, b"Mlocked:") or 0,
        per_cpu_free=read_per_cpu_free(),
    )


@dataclass(frozen=True)
class Baseline:
    """The machine before a launch, and (once it runs) the tree whose leftovers count."""

    mem: MemInfo
    shm_files: frozenset[tuple[str, int]]  # (name, inode) in /dev/shm at the launch
    boot_id: str
    at: float  # wall clock
    members: tuple[tuple[int, int], ...] = ()  # the tree's (pid, start time)
    cgroup: str | None = None  # the tree's own cgroup v2 directory
    # the /dev/shm files (device, inode) the tree was seen holding while it ran; None: not known
    shm_held: frozenset[tuple[int, int]] | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "mem_available": self.mem.mem_available,
            "per_cpu_free": self.mem.per_cpu_free,
            "shmem": self.mem.shmem,
            "mlocked": self.mem.mlocked,
            "shm_files": len(self.shm_files),
            "cgroup": self.cgroup,
            "at": self.at,
        }


def _shm_listing(shm_dir: Path = SHM_DIR) -> dict[tuple[str, int], os.stat_result]:
    out = {}
    try:
        entries = list(os.scandir(shm_dir))
    except OSError:
        return {}
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat_module.S_ISREG(st.st_mode):
            out[(e.name, st.st_ino)] = st
    return out


def take_baseline(*, shm_dir: Path = SHM_DIR) -> Baseline:
    """The machine now, before a launch."""
    return Baseline(
        mem=read_meminfo(),
        shm_files=frozenset(_shm_listing(shm_dir)),
        boot_id=proc.boot_id(),
        at=time.time(),
    )


def with_tree(
    baseline: Baseline,
    members: Iterable[tuple[int, int]],
    cgroup: str | None,
    shm_held: Iterable[tuple[int, int]] | None = None,
) -> Baseline:
    """The baseline with the tree that ran (its members are looked for among the survivors) and, when
    known, the /dev/shm files it was seen holding (proc.ProcessTree.shm_held's keys): a new file it
    never held is named as possibly another program's, not as one to remove."""
    held = None if shm_held is None else frozenset(shm_held)
    return dataclasses.replace(baseline, members=tuple(sorted(set(members))), cgroup=cgroup, shm_held=held)


@dataclass(frozen=True)
class MemoryBack:
    """The answer of wait_for_memory_back: `back` is True when no more than `threshold_bytes` of
    what the old server could have left is still missing."""

    back: bool
    leaked_bytes: int  # the fall since the baseline that the old server's leftovers account for
    shortfall_bytes: int  # free memory (MemAvailable + per-CPU lists) below the baseline
    threshold_bytes: int
    waited_s: float
    holders: list[Holder]  # named only when not back

    def record(self, baseline: Baseline) -> LeakRecord:
        return LeakRecord(
            leaked_bytes=self.leaked_bytes,
            threshold_bytes=self.threshold_bytes,
            shortfall_bytes=self.shortfall_bytes,
            waited_s=round(self.waited_s, 2),
            holders=self.holders,
            boot_id=baseline.boot_id,
            baseline_mlocked=baseline.mem.mlocked,
            baseline_shmem=baseline.mem.shmem,
            at=time.time(),
        )


def _resident(pid: int) -> tuple[int, int]:
    """A process's resident (private, shared-memory) bytes: RssAnon and RssShmem. Its shared pages
    are counted with the files and Shmem, not twice."""
    try:
        status = Path(f"/proc/{pid}/status").read_bytes()
    except OSError:
        return 0, 0
    return kib_field(status, b"RssAnon:") or 0, kib_field(status, b"RssShmem:") or 0


def _survivors(baseline: Baseline) -> list[Holder]:
    """Processes of the old tree (by pid and start time) or of its cgroup still alive."""
    idents = {proc.ProcessIdentity(pid, start) for pid, start in baseline.members}
    if baseline.cgroup:
        try:
            for line in Path(baseline.cgroup, "cgroup.procs").read_text().split():
                pid = int(line)
                start = proc.start_time_of(pid)
                if start is not None:
                    idents.add(proc.ProcessIdentity(pid, start))
        except (OSError, ValueError):
            pass  # removed with the tree: nothing left in it
    out = []
    for ident in sorted(idents, key=lambda i: i.pid):
        info = proc.read_stat(ident.pid)
        if not ident.matches(info) or info.dead:
            continue
        out.append(
            Holder(
                kind="process",
                name=info.comm,
                bytes=sum(_resident(ident.pid)),
                pids=[ident.pid],
                start_times=[ident.start_time],
            )
        )
    return out


def _ours(baseline: Baseline, holder: Holder) -> bool:
    """A new /dev/shm file is the old server's unless a process outside its tree uses it (a program
    running beside it, another server: theirs, not a leftover)."""
    tree = {pid for pid, _ in baseline.members}
    return all(pid in tree for pid in holder.pids)


def shm_holders(baseline: Baseline, shm_dir: Path = SHM_DIR) -> list[Holder]:
    """/dev/shm files made since the baseline and left by the old server, largest first, each with
    the processes that map it or hold it open (/proc/*/maps and /proc/*/fd): files only processes of
    the old tree use, or none."""
    new = [(key, st) for key, st in _shm_listing(shm_dir).items() if key not in baseline.shm_files]
    if not new:
        return []
    users: dict[tuple[int, int], list[tuple[int, int]]] = {(st.st_dev, st.st_ino): [] for _, st in new}
    devs = {dev for dev, _ in users}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        for dev in devs:
            held, _ = proc._shm_held(pid, dev)
            for key in held.keys() & users.keys():
                start = proc.start_time_of(pid)
                if start is not None:
                    users[key].append((pid, start))
    holders = [
        Holder(
            kind="shm_file",
            name=str(shm_dir / name),
            bytes=st.st_blocks * 512,
            pids=[p for p, _ in users[(st.st_dev, st.st_ino)]],
            start_times=[s for _, s in users[(st.st_dev, st.st_ino)]],
            inode=ino,
            seen_held=None if baseline.shm_held is None else (st.st_dev, ino) in baseline.shm_held,
        )
        for (name, ino), st in new
    ]
    holders = [h for h in holders if _ours(baseline, h)]
    holders.sort(key=lambda h: h.bytes, reverse=True)
    return holders


def _measure(baseline: Baseline, shm_dir: Path) -> tuple[int, int, MemInfo, list[Holder], list[Holder]]:
    """(shortfall, what the old server left, meminfo now, survivors, its /dev/shm files)."""
    now = read_meminfo()
    survivors = _survivors(baseline)
    files = shm_holders(baseline, shm_dir)
    # the per-CPU free pages count on both sides: a tree's teardown parks up to 1/8 of memory there
    shortfall = max(0, baseline.mem.free_to_use - now.free_to_use)
    mapped = {pid: 0 for h in survivors for pid in h.pids}  # our files' pages a survivor maps: counted once
    for f in files:
        for pid in f.pids:
            if pid in mapped:
                mapped[pid] += f.bytes
    leaked = leaked_bytes(
        files=sum(h.bytes for h in files),
        survivors=sum(max(0, h.bytes - sum(mapped[p] for p in h.pids)) for h in survivors),
        mlocked_growth=now.mlocked - baseline.mem.mlocked,
        shortfall=shortfall,
    )
    return shortfall, leaked, now, survivors, files


def wait_for_memory_back(
    baseline: Baseline,
    timeout_s: float = MEMORY_BACK_TIMEOUT_S,
    *,
    pool_bytes: int | None = None,
    interval_s: float = POLL_S,
    shm_dir: Path = SHM_DIR,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> MemoryBack:
    """Wait until the memory the old server held is back (within max(2 GiB, 3% of the pool)) or
    `timeout_s` passed; then say how much did not come back and, if any, what holds it.
    `pool_bytes`: the pool the 3% is of (MemTotal when None). Returns at once when nothing is held."""
    start = clock()
    pool = pool_bytes if pool_bytes is not None else baseline.mem.mem_total
    threshold = leak_threshold(pool)
    while True:
        shortfall, leaked, now, survivors, files = _measure(baseline, shm_dir)
        waited = clock() - start
        if leaked <= threshold:
            return MemoryBack(True, leaked, shortfall, threshold, waited, [])
        if waited >= timeout_s:
            break
        sleep(min(interval_s, max(0.0, timeout_s - waited)))
    named = [h for h in files if h.bytes >= SHM_HOLDER_MIN_BYTES][:MAX_SHM_HOLDERS]
    holders = [*named, *survivors, *_locked(baseline, now)]
    return MemoryBack(False, leaked, shortfall, threshold, clock() - start, holders)


def _locked(baseline: Baseline, now: MemInfo) -> list[Holder]:
    growth = now.mlocked - baseline.mem.mlocked
    if growth < LOCKED_MIN_BYTES:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            status = Path("/proc", entry, "status").read_bytes()
        except OSError:
            continue
        if (kib_field(status, b"VmLck:") or 0) > 0:
            pids.append(int(entry))
    return [Holder(kind="locked", name="locked memory (Mlocked)", bytes=growth, pids=pids)]


# ---------------------------------------------------------------- the gate before a launch


def still_held(record: LeakRecord) -> int:
    """How much of a recorded leak its holders still hold now: the named /dev/shm files that still
    exist (same inode), the named processes still alive (same start time), locked memory still
    above the launch's baseline. 0 on another boot (a reboot frees everything)."""
    if record.boot_id and record.boot_id != proc.boot_id():
        return 0
    total = 0
    for h in record.holders:
        if h.kind == "shm_file":
            try:
                st = os.stat(h.name, follow_symlinks=False)
            except OSError:
                continue
            if h.inode is None or st.st_ino == h.inode:
                total += st.st_blocks * 512
        elif h.kind == "process":
            for pid, start in zip(h.pids, h.start_times, strict=False):
                if proc.ProcessIdentity(pid, start).is_alive():
                    total += sum(_resident(pid))
        else:
            total += min(h.bytes, max(0, read_meminfo().mlocked - record.baseline_mlocked))
    if not record.holders:  # nothing named: locked memory still above the launch's
        total = min(record.leaked_bytes, max(0, read_meminfo().mlocked - record.baseline_mlocked))
    return total


def gate(leaks: Iterable[tuple[int, LeakRecord]], *, force: bool = False) -> list[str]:
    """Refuse a launch (UserError, exit 2) while a recorded leak (`(port, record)`) still holds more
    than its threshold; with `force`, the same words come back as warnings."""
    warnings = []
    for port, record in leaks:
        if not record.leaked:
            continue
        held = still_held(record)
        if held <= record.threshold_bytes:
            continue
        why = refusal(port, record, held)
        if not force:
            raise UserError(why)
        warnings.append(f"{why.removesuffix('; or pass --force to launch into it anyway')} (--force given)")
    return warnings

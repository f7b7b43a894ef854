"""Process control: spawn a command in its own session, know exactly which processes are ours,
stop or kill the whole tree, and clean the /dev/shm files it left.

Identity: a pid alone is not a process (pids are reused). A process is (pid, start time), the
start time being field 22 of /proc/PID/stat (clock ticks since boot). Every signal to a single
process goes through `signal_process`, which opens a pidfd first, then checks the start time,
then signals through the pidfd: once the pidfd is open it cannot point at a newer process, so
there is no window between check and signal. The process-group signal (killpg) is sent only
while the group number is provably ours: a pgid cannot be reused while any process still holds
it, so it is safe while the (unreaped) root, or a recorded member, is in the group.

Tree: vLLM's API server starts `VLLM::EngineCore` and workers; killing the server alone leaves
them running (and re-parented to PID 1). So every process seen as a child of a recorded one,
or in our process group or session, is recorded as (pid, start time) while it lives, and swept
by identity after the group is signalled.

/dev/shm: a SIGKILLed vLLM leaves its shared memory and semaphores there. While the tree runs,
every new file of those names that a member maps or holds open is recorded by device and inode
(names lie: see _shm_held). After the tree is gone, only recorded files that no live process
maps or holds open are removed; everything else stays, however leftover it looks.
"""

from __future__ import annotations

import fnmatch
import os
import select
import shutil
import signal
import stat as stat_module
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from sparktui.errors import UserError
from sparktui.paths import USER_UMASK_ENV, user_umask
from sparktui.runtime.host import provenance
from sparktui.runtime.host.containment import CgroupScope, fallback_description

SHM_DIR = Path("/dev/shm")
# What vLLM and its libraries leave in /dev/shm when killed: multiprocessing.shared_memory
# (psm_*), multiprocessing semaphores (sem.mp-*), vLLM's own mmaps (vllm_offload_*, vllm_ec_*)
# and torch's libshm (torch_*). Only these names are ever candidates for removal.
SHM_PATTERNS = ("psm_*", "sem.mp-*", "vllm_*", "torch_*")
# How often the members' maps and fds are read again while a new such file is still unexplained
# (another program's, most likely); a file never looked at before is looked at the next refresh.
SHM_RECHECK_S = 2.0
ShmKey = tuple[int, int]  # (st_dev, st_ino): a file, whatever name it has now or had when opened

# Run in the child before exec (a fresh interpreter, so no fork-with-threads hazard, unlike
# preexec_fn): ask the kernel to SIGKILL it when its parent goes away, then exec the command.
# Python ignores SIGPIPE and SIGXFSZ at start-up and ignored signals survive exec, so restore
# them. If the parent already died before prctl took effect, exit instead of running unguarded.
# The trampoline the command starts in: it joins the tree's cgroup (argv[2], "" for none) before
# anything of the command runs, so nothing it starts can escape; then PR_SET_PDEATHSIG (argv[1] is
# the parent's pid, "0" for none); then exec.
_PDEATHSIG_EXEC = (
    "import ctypes, os, signal, sys\n"
    "if sys.argv[2]:\n"
    "    try:\n"
    "        with open(sys.argv[2], 'w') as f: f.write(str(os.getpid()))\n"
    "    except OSError as e:\n"
    "        sys.stderr.write(f'sparktui: cannot join the cgroup {sys.argv[2]}: {e}\\n'); os._exit(71)\n"
    "if sys.argv[1] != '0':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"  # 1 = PR_SET_PDEATHSIG
    "    if os.getppid() != int(sys.argv[1]): os._exit(70)\n"
    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
    "signal.signal(signal.SIGXFSZ, signal.SIG_DFL)\n"
    # the OOM killer's first choice is the tree, not the supervisor (raising needs no privilege);
    # the user's own CPU priority back (a hardened supervisor runs at a higher one)
    "try:\n"
    "    with open('/proc/self/oom_score_adj', 'w') as f: f.write(os.environ.pop('SPARKTUI_TREE_OOM_SCORE_ADJ', '500'))\n"
    "except OSError: pass\n"
    "try: os.setpriority(os.PRIO_PROCESS, 0, int(os.environ.pop('SPARKTUI_USER_NICE')))\n"
    "except (KeyError, ValueError, OSError): pass\n"
    "os.execv(sys.argv[3], sys.argv[4:])\n"
)


@dataclass(frozen=True)
class ProcInfo:
    """One line of /proc/PID/stat, the fields we need."""

    pid: int
    ppid: int
    pgrp: int
    session: int
    state: str
    start_time: int  # clock ticks since boot (field 22)
    comm: str

    @property
    def dead(self) -> bool:
        # A zombie has already released its memory; it only waits to be reaped.
        return self.state in "ZXx"


def read_stat(pid: int) -> ProcInfo | None:
    """The process's stat line, or None when there is no such process."""
    try:  # os.open/os.read: half the cost of open() here, which matters in a /proc scan
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 1024)
        finally:
            os.close(fd)
    except OSError:
        return None
    # comm may contain spaces and parentheses: it ends at the last ')'.
    close = raw.rfind(b")")
    fields = raw[close + 2 :].split()
    try:
        return ProcInfo(
            pid=pid,
            ppid=int(fields[1]),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            state=fields[0].decode(),
            start_time=int(fields[19]),
            comm=raw[raw.find(b"(") + 1 : close].decode(errors="replace"),
        )
    except (IndexError, ValueError):
        return None


def start_time_of(pid: int) -> int | None:
    info = read_stat(pid)
    return None if info is None else info.start_time


def scan_processes() -> list[ProcInfo]:
    """Every process on the machine (~15 µs each: ~1.5 ms for 100 processes)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            info = read_stat(int(name))
            if info is not None:
                out.append(info)
    return out


def last_pid() -> int | None:
    """The pid (or thread id) most recently handed out on this machine, the 5th field of
    /proc/loadavg: while it stays the same, no process was created. None when unreadable."""
    try:
        fd = os.open("/proc/loadavg", os.O_RDONLY | os.O_CLOEXEC)
        try:
            raw = os.read(fd, 256)
        finally:
            os.close(fd)
        return int(raw.split()[4])
    except (OSError, IndexError, ValueError):
        return None


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


@dataclass(frozen=True)
class ProcessIdentity:
    pid: int
    start_time: int

    def matches(self, info: ProcInfo | None) -> TypeGuard[ProcInfo]:
        return info is not None and info.pid == self.pid and info.start_time == self.start_time

    def is_alive(self) -> bool:
        info = read_stat(self.pid)
        return self.matches(info) and not info.dead


def signal_process(ident: ProcessIdentity, sig: int) -> bool:
    """Send `sig` to exactly that process. False (nothing sent) if it is gone or the pid is reused."""
    pidfd = None
    if hasattr(os, "pidfd_open"):
        try:
            pidfd = os.pidfd_open(ident.pid)
        except ProcessLookupError:
            return False
        except OSError:
            pidfd = None  # old kernel: fall back to the (tiny) check-then-kill window
    try:
        info = read_stat(ident.pid)
        if not ident.matches(info) or info.dead:
            return False
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(ident.pid, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _shm_snapshot() -> set[tuple[str, int]]:
    try:
        return {(e.name, e.inode()) for e in os.scandir(SHM_DIR)}
    except OSError:
        return set()


@dataclass
class StopReport:
    """What stop()/kill() did and how long the tree took to go."""

    signals: list[dict[str, Any]] = field(default_factory=list)  # {"target", "signal", "at_s"}
    gone: bool = False
    gone_after_s: float | None = None  # from the first signal until no process of the tree was left
    escalated: bool = False  # SIGTERM was not enough: SIGKILL after the grace period
    survivors: list[int] = field(default_factory=list)
    shm_removed: list[str] = field(default_factory=list)
    shm_kept: list[str] = field(default_factory=list)  # new files of those names left: in use, or not the tree's
    refused: list[str] = field(default_factory=list)  # what a record named that sparktui did not start (left alone)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProcessTree:
    """A started command and every process it spawned. Create with `spawn()` or `from_record()`."""

    def __init__(
        self,
        root: ProcessIdentity,
        *,
        popen: subprocess.Popen[bytes] | None = None,
        spawned_at: float | None = None,
        shm_before: set[tuple[str, int]] | None = None,
        shm_held: dict[ShmKey, str] | None = None,
        recorded: Iterable[ProcessIdentity] = (),
        argv: list[str] | None = None,
        log_path: str | None = None,
        scope: CgroupScope | None = None,
        mark: str | None = None,
    ) -> None:
        self.root = root
        self.mark = mark  # the token its processes carry in their environment (provenance.py)
        self.refused: list[str] = []  # what its record named that is not provably sparktui's (from_record)
        self.scope = scope  # the tree's own cgroup, where the machine allows one (containment.py)
        self.pid = root.pid
        self.pgid = root.pid  # the root is the leader of its own session and group
        self.popen = popen
        self.spawned_at = spawned_at if spawned_at is not None else time.time()
        self.shm_before = shm_before
        self.shm_held: dict[ShmKey, str] = dict(shm_held or {})  # /dev/shm files seen held by members
        self._shm_examined: set[ShmKey] = set()  # new files already looked for in the members
        self._shm_looked_in: set[ProcessIdentity] = set()  # the members they were looked for in
        self._shm_recheck_at = 0.0
        self.argv = argv
        self.log_path = log_path
        self.generation = 0  # bumps when a member or a held /dev/shm file is recorded (callers re-save their state)
        self._lock = threading.RLock()
        self._recorded: dict[int, int] = {root.pid: root.start_time}
        for ident in recorded:
            self._recorded[ident.pid] = ident.start_time
        self._last_pid_scanned: int | None = None  # last_pid() before the latest /proc scan

    # --- identity and membership -------------------------------------------------------------

    @property
    def recorded(self) -> list[ProcessIdentity]:
        with self._lock:
            return [ProcessIdentity(p, s) for p, s in self._recorded.items()]

    def returncode(self) -> int | None:
        """The root's exit status once it has exited (only for a tree this process spawned).

        Before reaping the root, record its group: while the root is an unreaped zombie its pid
        pins the group number, so the members still in it are provably ours (a command that
        exits leaving a background child behind)."""
        if self.popen is None:
            return None
        if self.popen.returncode is None:
            try:
                exited = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                exited = None
            if exited is not None:
                self.refresh()
        code = self.popen.poll()
        if code is not None and self.scope is not None and not self.scope.populated():
            self.scope.remove()  # the command and all it started are gone: the cgroup goes too
        return code

    def _root_pinned(self) -> bool:
        # Our unreaped child keeps its pid (= the pgid) from being reused, alive or zombie.
        return self.popen is not None and self.popen.returncode is None

    def track(self) -> bool:
        """Record new members cheaply: from the cgroup when the tree has one (one file, no scan);
        otherwise a /proc scan only when some process was created since the last one (last_pid()
        moved). Then the /dev/shm look. True when it scanned. For a supervisor's slow cadence."""
        if self.scope is not None:
            self._record_contained()
            self._note_shm(self.recorded)
            return False
        newest = last_pid()
        if newest is not None and newest == self._last_pid_scanned:
            self._note_shm(self.recorded)
            return False
        self.refresh()
        return True

    def _record_contained(self) -> None:
        """Every process in the tree's cgroup is a member, re-parented or in another session or not."""
        assert self.scope is not None
        with self._lock:
            for pid in self.scope.procs():
                if pid in self._recorded:
                    continue  # (a pid reused inside the cgroup: refresh() records the new one)
                info = read_stat(pid)
                if info is not None and not info.dead:
                    self._recorded[pid] = info.start_time
                    self.generation += 1

    @property
    def containment(self) -> str:
        """Which mechanism holds the tree, in words (`status` prints it)."""
        return self.scope.describe() if self.scope is not None else fallback_description()

    def refresh(self, procs: list[ProcInfo] | None = None) -> list[ProcInfo]:
        """Record new members; return the live ones (not zombies)."""
        if procs is None:
            self._last_pid_scanned = last_pid()  # read before the scan: what is made during it moves it
            procs = scan_processes()
        contained = set(self.scope.procs()) if self.scope is not None else set()
        with self._lock:
            recorded = self._recorded
            for p in procs:
                if p.pid in contained and recorded.get(p.pid) != p.start_time:
                    recorded[p.pid] = p.start_time  # in our cgroup: ours, however it got there (setsid…)
                    self.generation += 1
            ours = {p.pid for p in procs if recorded.get(p.pid) == p.start_time}
            # The group/session number is ours while an unreaped root or a recorded member is in it.
            group_ours = self._root_pinned() or any(p.pgrp == self.pgid for p in procs if p.pid in ours)
            session_ours = self._root_pinned() or any(p.session == self.pgid for p in procs if p.pid in ours)
            by_pid = {p.pid: p for p in procs}
            changed = True
            while changed:
                changed = False
                for p in procs:
                    if p.pid in ours:
                        continue
                    parent = by_pid.get(p.ppid)
                    child_of_ours = p.ppid in ours and parent is not None and p.start_time >= parent.start_time
                    in_group = group_ours and p.pgrp == self.pgid and p.start_time >= self.root.start_time
                    in_session = session_ours and p.session == self.pgid and p.start_time >= self.root.start_time
                    if child_of_ours or in_group or in_session:
                        ours.add(p.pid)
                        recorded[p.pid] = p.start_time
                        self.generation += 1
                        changed = True
            live = [p for p in procs if p.pid in ours and not p.dead]
        self._note_shm(ProcessIdentity(p.pid, p.start_time) for p in live)
        return live

    def _note_shm(self, members: Iterable[ProcessIdentity]) -> None:
        """Record which new /dev/shm files (SHM_PATTERNS) the members map or hold open: the only
        ones ever removed after the tree stops. Reads the members' maps and fds only while some
        new file is unexplained: at once for a file not looked at before or a member not looked in
        (a file made between a /proc scan and this look is held by a member that scan missed),
        then every SHM_RECHECK_S."""
        members = list(members)
        with self._lock:
            new = _shm_new_files(self.spawned_at, self.shm_before)
            unexplained = new.keys() - self.shm_held.keys()
            now = time.monotonic()
            seen = unexplained <= self._shm_examined and set(members) <= self._shm_looked_in
            if not unexplained or (seen and now < self._shm_recheck_at):
                return
            found: dict[ShmKey, str] = {}
            for ident in members:
                for dev in {dev for dev, _ in unexplained}:
                    held, _ = _shm_held(ident.pid, dev)
                    # Still ours after the read, so it was ours during it (a pid never goes back
                    # to an older process): never take a reused pid's files for the tree's.
                    if start_time_of(ident.pid) == ident.start_time:
                        found.update((key, new[key][0]) for key in held.keys() & unexplained)
            self._shm_examined = (self._shm_examined & new.keys()) | unexplained
            self._shm_looked_in = set(members)
            self._shm_recheck_at = now + SHM_RECHECK_S
            if found:
                self.shm_held.update(found)
                self.generation += 1

    def live_members(self) -> list[ProcInfo]:
        return self.refresh()

    def _recorded_alive(self) -> list[ProcessIdentity]:
        """Cheap check (only our own pids' stat files): recorded members still running."""
        return [i for i in self.recorded if i.is_alive()]

    def is_gone(self) -> bool:
        self.returncode()  # reap the root if it has exited
        if self.scope is not None and self.scope.populated():
            return False
        return not self._recorded_alive() and not self.refresh()

    def release(self) -> None:
        """Once the tree is gone: remove its cgroup (kept while anything still lives in it)."""
        if self.scope is not None and not self.scope.populated():
            self.scope.remove()

    # --- signals -----------------------------------------------------------------------------

    def signal_group(self, sig: int, report: StopReport | None = None, t0: float | None = None) -> bool:
        """killpg(sig) if the group is still provably ours. Returns whether it was sent."""
        if not self._root_pinned():
            procs = scan_processes()
            with self._lock:
                if not any(p.pgrp == self.pgid and self._recorded.get(p.pid) == p.start_time for p in procs):
                    return False
        try:
            os.killpg(self.pgid, sig)
        except ProcessLookupError:
            return False
        if report is not None:
            report.signals.append(_signal_entry(f"group {self.pgid}", sig, t0))
        return True

    def _signal_members(self, sig: int, report: StopReport, t0: float, outside_group_only: bool) -> None:
        for info in self.refresh():
            if outside_group_only and info.pgrp == self.pgid:
                continue
            if signal_process(ProcessIdentity(info.pid, info.start_time), sig):
                report.signals.append(_signal_entry(f"pid {info.pid} ({info.comm})", sig, t0))

    def kill(
        self,
        *,
        on_poll: Callable[[], object] | None = None,
        on_signalled: Callable[[], None] | None = None,
        timeout: float = 10.0,
    ) -> StopReport:
        """SIGKILL the group and every recorded member at once; wait until gone; clean /dev/shm.
        `on_signalled` is called right after the group signal, before the wait."""
        report = StopReport(refused=list(self.refused))
        # Last look at the members' /dev/shm files while they can still be read (only when a new
        # file is unexplained; none, usually: the tracking refreshes saw them).
        self._note_shm(self._recorded_alive())
        t0 = time.monotonic()
        # Signal first (the fast path needs no full /proc scan), record afterwards.
        self._kill_scope(report, t0)
        self.signal_group(signal.SIGKILL, report, t0)
        if on_signalled is not None:
            on_signalled()
        self._signal_members(signal.SIGKILL, report, t0, outside_group_only=False)
        self._wait_gone(report, t0, t0 + timeout, _observe_only(on_poll), 0.01 if on_poll else 0.05)
        self._finish(report)
        return report

    def stop(
        self,
        grace: float = 10.0,
        *,
        on_poll: Callable[[], object] | None = None,
        on_signalled: Callable[[], None] | None = None,
        kill_timeout: float = 10.0,
    ) -> StopReport:
        """SIGTERM the group (and members that left it), SIGKILL after `grace`; wait; clean /dev/shm.

        `on_poll` is called every ~2 ms while waiting; when it returns true during the grace
        period, SIGKILL is sent at once (the guard uses this when its kill line is crossed)."""
        report = StopReport(refused=list(self.refused))
        self._note_shm(self._recorded_alive())  # as in kill()
        t0 = time.monotonic()
        self.signal_group(signal.SIGTERM, report, t0)
        self._signal_members(signal.SIGTERM, report, t0, outside_group_only=True)
        if on_signalled is not None:
            on_signalled()
        if not self._wait_gone(report, t0, t0 + grace, on_poll, 0.002 if on_poll else 0.05):
            report.escalated = True
            self._kill_scope(report, t0)
            self.signal_group(signal.SIGKILL, report, t0)
            self._signal_members(signal.SIGKILL, report, t0, outside_group_only=False)
            self._wait_gone(
                report, t0, time.monotonic() + kill_timeout, _observe_only(on_poll), 0.01 if on_poll else 0.05
            )
        self._finish(report)
        return report

    def _kill_scope(self, report: StopReport, t0: float) -> None:
        if self.scope is not None and self.scope.populated() and self.scope.kill():
            report.signals.append(_signal_entry(f"cgroup {self.scope.path.name}", signal.SIGKILL, t0))

    def _wait_gone(
        self, report: StopReport, t0: float, deadline: float, on_poll: Callable[[], object] | None, tick: float
    ) -> bool:
        """Wait until no process of the tree is left. Sleeps in poll() on pidfds, woken the moment
        a member exits, so the dying tree gets the CPU (on a busy box a busy-waiting watcher slows
        the teardown it measures); wakes every `tick` for on_poll, and every 100 ms for a /proc
        scan that catches members not recorded yet."""
        watcher = _ExitWatcher()
        next_scan = 0.0
        try:
            while True:
                now = time.monotonic()
                if now >= next_scan:
                    for info in self.refresh():
                        watcher.add(ProcessIdentity(info.pid, info.start_time))
                    next_scan = now + 0.1
                self.returncode()  # reap the root once it has exited
                if not watcher.alive():
                    if self.scope is not None and self.scope.populated():
                        next_scan = 0.0  # the cgroup still holds a process: find and watch it
                        watcher.wait(min(tick, 0.01))
                        if now >= deadline:
                            return False
                        continue
                    if not self.refresh():
                        report.gone = True
                        report.gone_after_s = time.monotonic() - t0
                        return True
                    next_scan = 0.0  # new members appeared: watch them too
                    continue
                if on_poll is not None and on_poll():
                    return False  # the caller wants to escalate now (e.g. the guard's kill line)
                if now >= deadline:
                    return False
                watcher.wait(min(tick, max(0.0, deadline - now)))
        finally:
            watcher.close()

    def _finish(self, report: StopReport) -> None:
        self.returncode()
        report.survivors = [i.pid for i in self._recorded_alive()]
        if report.gone:
            self.release()
            report.shm_removed, report.shm_kept = remove_shm_leftovers(self.shm_held, self.spawned_at, self.shm_before)

    # --- persistence (the supervisor's state file) -------------------------------------------

    def to_record(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "start_time": self.root.start_time,
            "boot_id": boot_id(),
            "spawned_at": self.spawned_at,
            "members": [[i.pid, i.start_time] for i in self.recorded],
            "shm_before": sorted([name, ino] for name, ino in (self.shm_before or ())),
            "shm_held": sorted([dev, ino, name] for (dev, ino), name in self.shm_held.items()),
            "argv": self.argv,
            "log_path": self.log_path,
            "cgroup": str(self.scope.path) if self.scope is not None else None,
            "mark": self.mark,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], *, vouched: bool = False) -> ProcessTree:
        """The tree a record names, holding only what is provably sparktui's (provenance.py): a
        live process without the record's mark, or a cgroup not made for it, is left out and
        described in `refused`; what is gone stays (signal_process never reaches a reused pid).

        The /dev/shm files the record says the tree held are removed after it stops only when the
        record is `vouched` for (the reaper's, straight from the tree's owner through its pipe) or
        its mark is proven by a live member carrying it: a record anyone could have written (a
        file) would otherwise have us delete any file of ours it lists. Without, only what the
        marked members are seen holding now (stop and kill look first) is removed."""
        shm = record.get("shm_before")
        mark = provenance.valid_mark(record.get("mark"))
        cgroup = str(record["cgroup"]) if record.get("cgroup") else None
        why_not_scope = provenance.scope_refusal(cgroup, mark) if cgroup else None
        root = ProcessIdentity(int(record["pid"]), int(record["start_time"]))
        members = [ProcessIdentity(int(p), int(s)) for p, s in record.get("members", [])]
        held = {(int(d), int(i)): str(n) for d, i, n in record.get("shm_held", [])}
        tree = cls(
            root,
            spawned_at=float(record["spawned_at"]),
            shm_before={(n, int(i)) for n, i in shm} if shm else None,
            shm_held=held if vouched else None,
            recorded=members,
            argv=record.get("argv"),
            log_path=record.get("log_path"),
            scope=CgroupScope(Path(cgroup)) if cgroup and why_not_scope is None else None,
            mark=mark,
        )
        if why_not_scope is not None:
            tree.refused.append(f"cgroup {cgroup} ({why_not_scope})")
        proven = False  # a live member carries the record's mark
        for ident in dict.fromkeys([root, *members]):
            info = read_stat(ident.pid)
            if not ident.matches(info) or info.dead:
                continue
            if mark and provenance.carries_mark(ident.pid, mark):
                proven = True
                continue
            del tree._recorded[ident.pid]
            why = "this record's tree mark is not in its environment" if mark else "the record has no tree mark"
            tree.refused.append(f"pid {ident.pid} ({info.comm}, {provenance.owner_of(ident.pid)}: {why})")
        if proven and not vouched:
            tree.shm_held.update(held)
        return tree


class _ExitWatcher:
    """Processes to wait for: pidfds in one poll() set; /proc polling where pidfds are missing."""

    def __init__(self) -> None:
        self._poller = select.poll()
        self._fds: dict[int, ProcessIdentity] = {}
        self._polled: set[ProcessIdentity] = set()
        self._seen: set[ProcessIdentity] = set()

    def add(self, ident: ProcessIdentity) -> None:
        if ident in self._seen:
            return
        self._seen.add(ident)
        try:
            fd = os.pidfd_open(ident.pid)
        except ProcessLookupError:
            return
        except (OSError, AttributeError):
            self._polled.add(ident)
            return
        info = read_stat(ident.pid)
        if not ident.matches(info) or info.dead:  # gone, or the pid was reused before the open
            os.close(fd)
            return
        self._fds[fd] = ident
        self._poller.register(fd, select.POLLIN)

    def alive(self) -> bool:
        self._polled = {i for i in self._polled if i.is_alive()}
        return bool(self._fds or self._polled)

    def wait(self, timeout: float) -> None:
        if self._polled:
            timeout = min(timeout, 0.002)
        if not self._fds:
            time.sleep(timeout)
            return
        for fd, _ in self._poller.poll(timeout * 1000):
            self._poller.unregister(fd)
            os.close(fd)
            del self._fds[fd]

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def _observe_only(on_poll: Callable[[], object] | None) -> Callable[[], bool] | None:
    """After SIGKILL there is nothing to escalate to: call on_poll but ignore its answer."""
    if on_poll is None:
        return None
    return lambda: bool(on_poll()) and False


def _signal_entry(target: str, sig: int, t0: float | None) -> dict[str, Any]:
    at = 0.0 if t0 is None else round(time.monotonic() - t0, 6)
    return {"target": target, "signal": signal.Signals(sig).name, "at_s": at}


def spawn(
    argv: list[str],
    log_path: str | os.PathLike[str] | None,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    *,
    pdeathsig: bool = True,
    inherit_stdin: bool = False,
    contain: bool = True,
) -> ProcessTree:
    """Start `argv` (a list, never a shell) in a new session and process group, stdout and stderr
    appended to `log_path` (None: ours, for a foreground wrapper), stdin from /dev/null (or ours
    with `inherit_stdin`), environment exactly `env` (default: ours).

    With `pdeathsig` (Linux), the kernel SIGKILLs the command if the *thread* that spawned it
    exits (that is how PR_SET_PDEATHSIG works): spawn from a thread that lives as long as the
    command (the main thread or the supervisor's own), or pass pdeathsig=False.

    With `contain`, the command starts in a cgroup of its own where the machine allows one
    (containment.py), so that nothing it starts can leave the tree; `tree.containment` says.
    """
    if not argv or not all(isinstance(a, str) for a in argv):
        raise UserError(f"command to run must be a non-empty list of strings, got {argv!r}")
    env = dict(os.environ if env is None else env)
    executable = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if executable is None:
        raise UserError(
            f"command not found: {argv[0]!r} (searched PATH={env.get('PATH', os.defpath)!r}); "
            "give a full path or fix PATH"
        )
    executable = os.path.abspath(executable)
    full = [executable, *argv[1:]]
    # the mark its every process carries: what proves, later, from a record, that sparktui started it
    mark = provenance.valid_mark(env.get(provenance.TREE_MARK_ENV)) or provenance.new_mark()
    env[provenance.TREE_MARK_ENV] = mark
    scope = CgroupScope.create(Path(executable).name, provenance.scope_tag(mark)) if contain else None
    linux = sys.platform.startswith("linux")
    if linux and (pdeathsig or scope is not None):
        parent = str(os.getpid()) if pdeathsig else "0"
        procs = str(scope.procs_file) if scope is not None else ""
        full = [sys.executable, "-I", "-S", "-c", _PDEATHSIG_EXEC, parent, procs, executable, argv[0], *argv[1:]]
    if log_path is not None:
        log_path = Path(log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
    shm_before = _shm_snapshot()
    spawned_at = time.time()
    log = open(log_path, "ab") if log_path is not None else None  # noqa: SIM115 (closed below once the child holds it)
    try:
        popen = subprocess.Popen(
            full,
            stdin=None if inherit_stdin else subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT if log is not None else None,
            env={k: v for k, v in env.items() if k != USER_UMASK_ENV},
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            umask=user_umask(),  # the user's: sparktui's own files are private, vLLM's are as the user wants
        )
    except BaseException:
        if scope is not None:
            scope.remove()
        raise
    finally:
        if log is not None:
            log.close()
    # The unreaped child cannot vanish from /proc, so its start time is always readable here.
    start = start_time_of(popen.pid)
    assert start is not None, "a just-spawned, unreaped child has a /proc entry"
    return ProcessTree(
        ProcessIdentity(popen.pid, start),
        popen=popen,
        spawned_at=spawned_at,
        shm_before=shm_before,
        argv=list(argv),
        log_path=None if log_path is None else str(log_path),
        scope=scope,
        mark=mark,
    )


def sweep_orphans(record: dict[str, Any], *, vouched: bool = False, look_first: bool = True) -> StopReport:
    """Kill what is left of a tree recorded (to_record) by an earlier run: only processes whose
    pid and start time match the record, on the same boot, that carry its mark (from_record),
    plus what they started; then /dev/shm (the record's list only when `vouched`, or its mark
    proven: from_record). What it refused is in the report's `refused`."""
    if record.get("boot_id") and record["boot_id"] != boot_id():
        return StopReport(gone=True, gone_after_s=0.0)  # rebooted since: every recorded pid is stale
    tree = ProcessTree.from_record(record, vouched=vouched)
    if look_first:
        # The record may predate members (an owner stopped or killed before it saw vLLM's EngineCore):
        # a scan finds them and looks at their /dev/shm files while they can still be read. Not at a
        # kill line (look_first=False): there the SIGKILL comes first, and a file may stay.
        tree.refresh()
    return tree.kill()


# --- /dev/shm ----------------------------------------------------------------------------------


def _shm_new_files(since: float, before: set[tuple[str, int]] | None) -> dict[ShmKey, tuple[str, int]]:
    """/dev/shm files named like SHM_PATTERNS, regular, owned by us and created after `since`
    (wall clock; and absent from the `before` snapshot when there is one): {key: (name, mode)}."""
    uid = os.getuid()
    out: dict[ShmKey, tuple[str, int]] = {}
    try:
        entries = list(os.scandir(SHM_DIR))
    except OSError:
        return out
    for e in entries:
        if not any(fnmatch.fnmatchcase(e.name, p) for p in SHM_PATTERNS):
            continue
        if before is not None and (e.name, e.inode()) in before:
            continue
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        # ctime is when the inode last changed: never earlier than its creation.
        if not stat_module.S_ISREG(st.st_mode) or st.st_uid != uid or st.st_ctime < since - 1.0:
            continue
        out[(st.st_dev, st.st_ino)] = (e.name, st.st_mode)
    return out


def _shm_held(pid: int, shm_dev: int) -> tuple[dict[ShmKey, str], bool]:
    """The files on /dev/shm's device (`shm_dev`) that process `pid` maps or holds open, by device
    and inode, each with the name it knows the file by (glibc's sem_open maps a temporary
    `sem.XXXXXX`, links it to its real name and unlinks the temporary one: the mapping shows the
    old name, `(deleted)`, for the live semaphore; only the inode is reliable). Second value:
    False when some of it could not be read (another user's process, without privilege). A
    process that is gone holds nothing."""
    held: dict[ShmKey, str] = {}
    complete = True
    # maps: "start-end perms offset MAJOR:MINOR INODE path", the device in hex, as the kernel prints it.
    token = b" %02x:%02x " % (os.major(shm_dev), os.minor(shm_dev))
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            data = f.read()
    except PermissionError:
        data, complete = b"", False
    except OSError:  # gone
        return held, True
    if token in data:
        for line in data.splitlines():
            if token not in line:
                continue
            parts = line.split(None, 5)
            try:
                major, minor = (int(x, 16) for x in parts[3].split(b":"))
                ino = int(parts[4])
            except (IndexError, ValueError):
                continue
            if os.makedev(major, minor) == shm_dev and ino:
                path = parts[5].decode(errors="replace") if len(parts) > 5 else ""
                held[(shm_dev, ino)] = os.path.basename(path.removesuffix(" (deleted)"))
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except PermissionError:
        return held, False
    except OSError:
        return held, complete
    for fd in fds:
        link = f"/proc/{pid}/fd/{fd}"
        try:
            target = os.readlink(link)
            if not target.startswith("/"):
                continue  # socket:[…], pipe:[…], anon_inode:…: never a /dev/shm file
            st = os.stat(link)  # follows to the open file itself, renamed or deleted
        except PermissionError:
            complete = False
            continue
        except OSError:  # closed meanwhile
            continue
        if st.st_dev == shm_dev:
            held[(st.st_dev, st.st_ino)] = os.path.basename(target.removesuffix(" (deleted)"))
    return held, complete


def _shm_in_use(keys: set[ShmKey]) -> tuple[set[ShmKey], bool]:
    """Which of these files any live process maps or holds open. Second value: some process
    could not be inspected (another user's, without privilege)."""
    used: set[ShmKey] = set()
    blind = False
    devs = {dev for dev, _ in keys}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for dev in devs:
            held, complete = _shm_held(int(pid), dev)
            used |= held.keys() & keys
            blind = blind or not complete
    return used, blind


def remove_shm_leftovers(
    held: Iterable[ShmKey], since: float, before: set[tuple[str, int]] | None = None
) -> tuple[list[str], list[str]]:
    """Remove the /dev/shm files a stopped tree left: named like SHM_PATTERNS, owned by us,
    created after `since` (and absent from `before`), seen mapped or open by the tree while it
    ran (`held`: device and inode, never a name), and mapped or open by no live process now.
    Returns (removed, kept): kept are the other new files of those names, in use by a live
    process or never seen held by the tree. A file the tree created but was never seen holding
    (made and let go between two looks) stays: it could as well be another program's, and
    deleting a live semaphore kills that program, while a leftover file only costs memory."""
    new = _shm_new_files(since, before)
    if not new:
        return [], []
    held = set(held)
    ours = {key for key in new if key in held}
    used, blind = _shm_in_use(ours) if ours else (set(), False)
    removed, kept = [], []
    for key, (name, mode) in sorted(new.items(), key=lambda kv: kv[1][0]):
        # If some process was not inspectable and could open the file, keep it: never guess.
        if key not in ours or key in used or (blind and mode & 0o066):
            kept.append(name)
            continue
        try:
            st = os.stat(SHM_DIR / name, follow_symlinks=False)
            if (st.st_dev, st.st_ino) != key:
                continue  # replaced since we looked: not the file the tree held
            os.unlink(SHM_DIR / name)
            removed.append(name)
        except FileNotFoundError:
            pass
        except OSError:
            kept.append(name)
    return removed, kept

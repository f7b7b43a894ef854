"""Harden the supervisor (the guard lives in it) against the memory pressure it exists for, as
earlyoom does for itself: its pages locked in RAM, a higher CPU priority, and the kernel OOM
killer pointed at vLLM's tree rather than at the supervisor.

Each step is best effort: without the privilege (CAP_IPC_LOCK beyond RLIMIT_MEMLOCK, CAP_SYS_NICE,
CAP_SYS_RESOURCE) it is skipped and said so; the guard works either way. What each costs is
measured by bench/supervisor_rest.py (locked memory, CPU at rest)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
from pathlib import Path

MCL_CURRENT, MCL_FUTURE, MCL_ONFAULT = 1, 2, 4
SUPERVISOR_NICE = -5  # above vLLM's 0: the guard's thread gets the CPU when vLLM floods it
SUPERVISOR_OOM_SCORE_ADJ = -500  # the OOM killer's last choice among ours (root only: lowering needs privilege)
TREE_OOM_SCORE_ADJ = 500  # vLLM's tree: its first choice (raising is allowed to anyone)


@dataclasses.dataclass
class Hardening:
    locked_kib: int | None = None  # VmLck after mlockall (None: not locked)
    nice: int | None = None
    oom_score_adj: int | None = None
    skipped: list[str] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        done = []
        if self.locked_kib is not None:
            done.append(f"memory locked ({self.locked_kib / 1024:.0f} MiB so far, pages as touched)")
        if self.nice is not None:
            done.append(f"nice {self.nice}")
        if self.oom_score_adj is not None:
            done.append(f"oom_score_adj {self.oom_score_adj}")
        text = "guard hardening: " + (", ".join(done) or "none")
        text += f"; vLLM's tree gets oom_score_adj {TREE_OOM_SCORE_ADJ}"
        return text + (f" (skipped: {'; '.join(self.skipped)})" if self.skipped else "")


def vm_locked_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmLck:"):
            return int(line.split()[1])
    return 0


def harden_supervisor() -> Hardening:
    out = Hardening()
    libc = ctypes.CDLL(None, use_errno=True)
    # MCL_ONFAULT: lock pages as they are touched, not the whole address space at once
    if libc.mlockall(MCL_CURRENT | MCL_FUTURE | MCL_ONFAULT) == 0:
        out.locked_kib = vm_locked_kib()
    else:
        out.skipped.append(f"mlockall: {os.strerror(ctypes.get_errno())}")
    try:
        os.setpriority(os.PRIO_PROCESS, 0, SUPERVISOR_NICE)
        out.nice = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError as exc:
        out.skipped.append(f"nice {SUPERVISOR_NICE}: {exc.strerror}")
    try:
        Path("/proc/self/oom_score_adj").write_text(str(SUPERVISOR_OOM_SCORE_ADJ))
        out.oom_score_adj = SUPERVISOR_OOM_SCORE_ADJ
    except OSError as exc:
        out.skipped.append(f"oom_score_adj {SUPERVISOR_OOM_SCORE_ADJ}: {exc.strerror}")
    return out
